"""Writers of simulated ranks in the real profilers' formats (Kineto JSON, Ascend PyTorch profiler folders)."""
