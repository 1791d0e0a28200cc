"""What each operator family is called on each device: GPU kernel names, Ascend kernel names and op types."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NpuKernel:
    name: str
    op_type: str
    task_type: str  # AI_CORE, AI_VECTOR_CORE, MIX_AIC, MIX_AIV
    core: str  # Accelerator Core column


_H100_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
_A100_GEMM = "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn"

GPU: dict[str, str] = {
    "gemm": _H100_GEMM,
    "gemm_dgrad": _H100_GEMM.replace("_tn_n_", "_nn_n_"),
    "gemm_wgrad": _H100_GEMM.replace("_tn_n_", "_nt_n_"),
    "attention": "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, true, false, false, false, true, true, false>(Flash_fwd_params)",
    "attention_bwd": "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, true, false, false, false, false, true>(Flash_bwd_params)",
    "norm": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "norm_bwd": "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
    "add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "gelu": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
    "gelu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)",
    "embedding": "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, unsigned int, long)",
    "embedding_bwd": "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)",
    "loss": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
    "loss_bwd": "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)",
    "router": "void at::native::sbtopk::gatherTopK<c10::BFloat16, unsigned int, 2, false>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int)",
    "optimizer": "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, int>, float, float, float, float, float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float, float, int>, float, float, float, float, float, float, adamMode_t, float)",
    "conv": "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn",
    "conv_dgrad": "sm80_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn",
    "conv_wgrad": "sm80_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn",
    "bn": "void cudnn::bn_fw_tr_1C11_singleread_spec<__nv_bfloat16, float, 512, 1, 2, 0>(cudnnTensorStruct, __nv_bfloat16 const*, cudnnTensorStruct, __nv_bfloat16*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
    "bn_bwd": "void cudnn::bn_bw_1C11_singleread_spec<__nv_bfloat16, float, float2, 512, 1, 2, 0>(float, float, float, float, cudnnTensorStruct, __nv_bfloat16 const*, cudnnTensorStruct, __nv_bfloat16 const*, cudnnTensorStruct, __nv_bfloat16*, float const*, float*, float*, float const*, float const*, float)",
    "relu": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#14}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#14}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
    "relu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::threshold_kernel_impl<c10::BFloat16>(at::TensorIteratorBase&, c10::BFloat16, c10::BFloat16)::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::(anonymous namespace)::threshold_kernel_impl<c10::BFloat16>(at::TensorIteratorBase&, c10::BFloat16, c10::BFloat16)::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)",
    "pool": "void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::BFloat16>(c10::BFloat16 const*, int, long, long, long, int, int, int, int, int, int, int, int, int, int, int, c10::BFloat16*, long*)",
}

NPU: dict[str, NpuKernel] = {
    "gemm": NpuKernel("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "AI_CORE"),
    "gemm_dgrad": NpuKernel("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", "AI_CORE"),
    "gemm_wgrad": NpuKernel("aclnnMatmul_MatMulCommon_MatMulV3", "MatMulV3", "AI_CORE", "AI_CORE"),
    "attention": NpuKernel(
        "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
        "FlashAttentionScore",
        "MIX_AIC",
        "MIX_AIC",
    ),
    "attention_bwd": NpuKernel(
        "aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
        "FlashAttentionScoreGrad",
        "MIX_AIC",
        "MIX_AIC",
    ),
    "norm": NpuKernel(
        "aclnnLayerNorm_LayerNormV4_LayerNormV4", "LayerNormV4", "AI_VECTOR_CORE", "AI_VECTOR_CORE"
    ),
    "norm_bwd": NpuKernel(
        "aclnnLayerNormBackward_LayerNormGradV3_LayerNormGradV3",
        "LayerNormGradV3",
        "AI_VECTOR_CORE",
        "AI_VECTOR_CORE",
    ),
    "add": NpuKernel("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", "AI_VECTOR_CORE"),
    "gelu": NpuKernel("aclnnGelu_GeluAiCore_Gelu", "Gelu", "AI_VECTOR_CORE", "AI_VECTOR_CORE"),
    "gelu_bwd": NpuKernel(
        "aclnnGeluBackward_GeluGradAiCore_GeluGrad", "GeluGrad", "AI_VECTOR_CORE", "AI_VECTOR_CORE"
    ),
    "embedding": NpuKernel(
        "aclnnEmbedding_GatherV2AiCore_GatherV2", "GatherV2", "AI_VECTOR_CORE", "AI_VECTOR_CORE"
    ),
    "embedding_bwd": NpuKernel(
        "aclnnEmbeddingDenseBackward_EmbeddingDenseGrad_EmbeddingDenseGrad",
        "EmbeddingDenseGrad",
        "AI_VECTOR_CORE",
        "AI_VECTOR_CORE",
    ),
    "loss": NpuKernel(
        "aclnnLogSoftmax_LogSoftmaxAiCore_LogSoftmaxV2", "LogSoftmaxV2", "AI_VECTOR_CORE", "AI_VECTOR_CORE"
    ),
    "loss_bwd": NpuKernel(
        "aclnnLogSoftmaxBackward_LogSoftmaxGradAiCore_LogSoftmaxGrad",
        "LogSoftmaxGrad",
        "AI_VECTOR_CORE",
        "AI_VECTOR_CORE",
    ),
    "router": NpuKernel("aclnnTopk_TopkV2_TopKV2", "TopKV2", "MIX_AIV", "MIX_AIV"),
    "optimizer": NpuKernel(
        "aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList",
        "ForeachAddList",
        "AI_VECTOR_CORE",
        "AI_VECTOR_CORE",
    ),
    "conv": NpuKernel("Conv2D", "Conv2D", "AI_CORE", "AI_CORE"),
    "conv_dgrad": NpuKernel("Conv2DBackpropInput", "Conv2DBackpropInput", "AI_CORE", "AI_CORE"),
    "conv_wgrad": NpuKernel("Conv2DBackpropFilter", "Conv2DBackpropFilter", "AI_CORE", "AI_CORE"),
    "bn": NpuKernel(
        "aclnnBatchNorm_BNTrainingUpdate_BNTrainingUpdate",
        "BNTrainingUpdate",
        "AI_VECTOR_CORE",
        "AI_VECTOR_CORE",
    ),
    "bn_bwd": NpuKernel(
        "aclnnBatchNormBackward_BNTrainingUpdateGrad_BNTrainingUpdateGrad",
        "BNTrainingUpdateGrad",
        "AI_VECTOR_CORE",
        "AI_VECTOR_CORE",
    ),
    "relu": NpuKernel("aclnnRelu_ReluAiCore_Relu", "Relu", "AI_VECTOR_CORE", "AI_VECTOR_CORE"),
    "relu_bwd": NpuKernel(
        "aclnnThresholdBackward_ReluGrad_ReluGrad", "ReluGrad", "AI_VECTOR_CORE", "AI_VECTOR_CORE"
    ),
    "pool": NpuKernel(
        "aclnnMaxPool2dWithMask_MaxPoolWithArgmaxV1_MaxPoolWithArgmaxV1",
        "MaxPoolWithArgmaxV1",
        "AI_CORE",
        "AI_CORE",
    ),
}


def gpu_kernel(family: str, device: str) -> str:
    """The CUDA kernel name of an operator family on ``device`` (h100 or a100)."""
    name = GPU[family]
    if device == "a100" and family.startswith("gemm"):
        return _A100_GEMM.replace("_tn", {"gemm_dgrad": "_nn", "gemm_wgrad": "_nt"}.get(family, "_tn"))
    return name


NCCL_TYPES = {"BFloat16": "bf16", "Float": "f32", "Long": "i64"}
HCCL_TYPES = {"BFloat16": "BF16", "Float": "FP32", "Long": "INT64"}
NCCL_COLL = {
    "allreduce": "AllReduce_Sum_{t}",
    "_allgather_base": "AllGather",
    "_reduce_scatter_base": "ReduceScatter_Sum_{t}",
    "broadcast": "Broadcast",
}
HCCL_COLL = {
    "allreduce": "hcom_allReduce_",
    "_allgather_base": "hcom_allGather_",
    "_reduce_scatter_base": "hcom_reduceScatter_",
    "broadcast": "hcom_broadcast_",
    "alltoall_base": "hcom_alltoallv_",
    "send": "hcom_send_",
    "recv": "hcom_receive_",
}


def nccl_kernel(collective: str, dtype: str, algorithm: str, protocol: str) -> str:
    """``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)`` and friends (NCCL >= 2.19)."""
    if collective in ("send", "recv", "alltoall_base"):
        return "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    body = NCCL_COLL[collective].format(t=NCCL_TYPES.get(dtype, "f32"))
    return f"ncclDevKernel_{body}_{algorithm}_{protocol}(ncclDevKernelArgsStorage<4096ul>)"
