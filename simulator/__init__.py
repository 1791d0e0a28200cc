"""Simulator of multi-GPU and NPU training jobs, with faults injected on purpose and the ground truth written.

``simulate(SimConfig(...)) -> Path`` writes one trace per rank in the real profilers' formats (Kineto JSON or
Ascend ``*_ascend_pt`` folders) and ``ground_truth.json``; ``paradiag simulate`` is the command line.
"""

from __future__ import annotations

from paradiag.simulator.config import ConfigError, SimConfig
from paradiag.simulator.faults import KINDS as FAULT_KINDS
from paradiag.simulator.faults import Fault, FaultError
from paradiag.simulator.faults import parse as parse_fault
from paradiag.simulator.run import simulate

__all__ = ["FAULT_KINDS", "ConfigError", "Fault", "FaultError", "SimConfig", "parse_fault", "simulate"]
