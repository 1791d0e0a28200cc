"""Device and interconnect specifications: what an operator or a transfer costs on each accelerator."""

from __future__ import annotations

from dataclasses import dataclass

DEVICES_PER_NODE = 8  # devices of a node (a host): the simulator's default


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator model and the links of the nodes it sits in (bandwidths in GB/s, latencies in us)."""

    key: str
    name: str  # as the profiler reports it
    kind: str  # gpu or npu
    peak_tflops: float  # dense bf16
    hbm_gbps: float
    memory_bytes: int
    sms: int
    compute_capability: tuple[int, int]
    intra_gbps: float  # per-device bandwidth a ring gets inside a node (NVLink / HCCS)
    inter_gbps: float  # per-device bandwidth across nodes (InfiniBand / RoCE)
    intra_latency_us: float
    inter_latency_us: float
    intra_link: str  # link type as the profiler names it
    inter_link: str
    launch_us: float  # host cost of one kernel launch
    kernel_floor_us: float  # the shortest kernel
    host_comm_us: float = 16.0  # torch2: host cost of a c10d op (CPU: enqueueing the gloo work)


DEVICES: dict[str, DeviceSpec] = {
    "h100": DeviceSpec(
        "h100",
        "NVIDIA H100 80GB HBM3",
        "gpu",
        989.0,
        3350.0,
        85_520_809_984,
        132,
        (9, 0),
        360.0,
        48.0,
        3.0,
        9.0,
        "NVLINK",
        "IB",
        5.0,
        2.0,
    ),
    "a100": DeviceSpec(
        "a100",
        "NVIDIA A100-SXM4-80GB",
        "gpu",
        312.0,
        2039.0,
        85_198_045_184,
        108,
        (8, 0),
        230.0,
        24.0,
        4.0,
        10.0,
        "NVLINK",
        "IB",
        6.0,
        2.5,
    ),
    "910b": DeviceSpec(
        "910b",
        "Ascend910B2",
        "npu",
        376.0,
        1600.0,
        68_719_476_736,
        24,
        (0, 0),
        110.0,
        23.0,
        6.0,
        14.0,
        "HCCS",
        "ROCE",
        9.0,
        3.0,
    ),
    # A CPU socket running one rank per NUMA slice (gloo over TCP: loopback inside a host, Ethernet across hosts).
    "cpu": DeviceSpec(
        "cpu",
        "CPU",
        "cpu",
        2.5,
        180.0,
        137_438_953_472,
        0,
        (0, 0),
        6.0,
        3.0,
        25.0,
        60.0,
        "LOOPBACK",
        "ETHERNET",
        2.0,
        4.0,
        150.0,
    ),
}

MATMUL_EFFICIENCY = 0.62
OTHER_EFFICIENCY = 0.25
MEMORY_EFFICIENCY = 0.8


def get(key: str) -> DeviceSpec:
    """The spec named ``key`` (h100, a100, 910b)."""
    try:
        return DEVICES[key]
    except KeyError:
        raise ValueError(f"unknown device {key!r}; choose one of {', '.join(DEVICES)}") from None


def op_time_us(spec: DeviceSpec, flops: float, nbytes: float, dense: bool) -> float:
    """Roofline time of one kernel: the slower of its math and its memory traffic, plus the kernel floor."""
    efficiency = MATMUL_EFFICIENCY if dense else OTHER_EFFICIENCY
    compute = flops / (spec.peak_tflops * 1e12 * efficiency) * 1e6
    memory = nbytes / (spec.hbm_gbps * 1e9 * MEMORY_EFFICIENCY) * 1e6
    return max(compute, memory) + spec.kernel_floor_us
