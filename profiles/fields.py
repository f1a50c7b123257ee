"""The field table: every number a profile holds, once — its YAML key, its dataclass field and the
dimension its quantity is parsed in (tierlab.units), and for the software profile whether a term is
one of DeepSpeed's host costs (measured by `tierlab calibrate`) and whether validate/fit.py fits it.

The loader (profiles/load.py), the sweep keys (sweeps/keys.py), the spreads and the fit
(validate/spread.py, validate/fit.py) and calibrate's writer (runner/calibrate_profile.py) read
these tables; none of them spells a key, a field or a dimension of its own. Pure data, no imports
from the rest of tierlab, so the schema itself can read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

PEAK_FLOPS_DTYPES = ("fp32", "tf32", "fp16", "bf16")
"""The dtypes a GPU profile's peak_flops may list (fp32 required)."""

FOLDERS = {"system": "systems", "pcie": "systems", "network": "systems", "gpu": "gpus",
           "cpu": "cpus", "nvme": "nvme"}
"""Part -> the hardware/ folder of the file that holds it (a system file holds its PCIe and
network blocks)."""


@dataclass(frozen=True)
class HardwareField:
    """One number of a hardware profile."""

    part: str
    """'system' (the system file's own keys), 'gpu', 'cpu', 'nvme', 'pcie' or 'network': the
    Hardware attribute that holds it (none for 'system')."""
    key: str
    """The YAML key in that part ('peak_flops.fp16': key fp16 of the peak_flops block)."""
    field: str
    """The dataclass field ('peak_flops.fp16': key fp16 of GPU.peak_flops)."""
    dimension: str
    """What its quantity measures (tierlab.units.parse_quantity); 'count' is a whole number."""
    required: bool = True
    default: float | int | None = None
    """The value when an optional key is absent (None: the field's own default / left out)."""
    sweep: str | None = ""
    """Its `--vary` key: '' = PART.KEY ('system': KEY), None = not a sweep key."""
    exact: bool = False
    """A count or a capacity: no default range (profiles/ranges; a stated range is honoured)."""
    steady: bool = True
    """It enters the steady step's time (False: a recorded fact or memory only; sim/ranges)."""

    @property
    def sweep_key(self) -> str | None:
        if self.sweep != "":
            return self.sweep
        return self.key if self.part == "system" else f"{self.part}.{self.key}"

    @property
    def path(self) -> tuple[str, ...]:
        """Attribute path in Hardware: ('pcie', 'h2d_pinned_Bps'), ('gpu', 'peak_flops', 'fp16')."""
        head = () if self.part == "system" else (self.part,)
        return (*head, *self.field.split("."))


_BANDWIDTHS = ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")

HARDWARE_FIELDS: tuple[HardwareField, ...] = (
    HardwareField("system", "dram", "dram_bytes", "bytes", exact=True),
    HardwareField("gpu", "hbm", "hbm_bytes", "bytes", exact=True),
    HardwareField("gpu", "hbm_bandwidth", "hbm_bandwidth_Bps", "bytes/s"),
    HardwareField("gpu", "nvlink_bandwidth", "nvlink_bandwidth_Bps", "bytes/s", False, 0.0),
    HardwareField("gpu", "cuda_context", "cuda_context_bytes", "bytes", steady=False),
    *(HardwareField("gpu", f"peak_flops.{d}", f"peak_flops.{d}", "flop/s", d == "fp32")
      for d in PEAK_FLOPS_DTYPES),
    HardwareField("cpu", "cores", "cores", "count", exact=True),
    HardwareField("cpu", "sockets", "sockets", "count", exact=True),
    HardwareField("cpu", "dram_bandwidth", "dram_bandwidth_Bps", "bytes/s"),
    HardwareField("cpu", "adam_throughput", "adam_params_per_s", "params/s"),
    HardwareField("cpu", "adam_one_thread_throughput", "adam_one_thread_params_per_s", "params/s",
                  False, sweep=None, steady=False),
    HardwareField("cpu", "module_call", "module_call_s", "seconds", False, sweep=None,
                  steady=False),
    HardwareField("cpu", "cast16_throughput", "cast16_params_per_s", "params/s", False,
                  sweep=None),
    HardwareField("system", "nvme_drives", "nvme_drives", "count", False, 0, sweep="nvme.drives",
                  exact=True),
    HardwareField("nvme", "read_bandwidth", "read_bandwidth_Bps", "bytes/s"),
    HardwareField("nvme", "write_bandwidth", "write_bandwidth_Bps", "bytes/s"),
    HardwareField("nvme", "capacity", "capacity_bytes", "bytes", exact=True),
    HardwareField("nvme", "latency", "latency_s", "seconds"),
    *(HardwareField("pcie", k, f"{k}_Bps", "bytes/s") for k in _BANDWIDTHS),
    HardwareField("pcie", "switch_uplink", "switch_uplink_Bps", "bytes/s", False),
    HardwareField("pcie", "latency", "latency_s", "seconds"),
    HardwareField("pcie", "gpus_per_switch", "gpus_per_switch", "count", False, 1, exact=True),
    HardwareField("pcie", "nvme_per_switch", "nvme_per_switch", "count", False, 0, exact=True),
    HardwareField("network", "nic_bandwidth", "nic_bandwidth_Bps", "bytes/s"),
    HardwareField("network", "latency", "latency_s", "seconds"),
    HardwareField("system", "gpus_per_node", "gpus_per_node", "count", sweep=None,  # --gpus
                  exact=True),
    HardwareField("system", "nodes", "nodes", "count", False, 1, sweep=None,  # --nodes
                  exact=True),
)
"""Every number of a hardware profile, in the order `tierlab sweep --list-keys` lists them."""


def part_fields(part: str) -> tuple[HardwareField, ...]:
    """The rows of one part, in table order."""
    return tuple(f for f in HARDWARE_FIELDS if f.part == part)


def hardware_field(part: str, field: str) -> HardwareField:
    """The row of `part`'s dataclass field; unknown -> KeyError."""
    for f in HARDWARE_FIELDS:
        if f.part == part and f.field == field:
            return f
    raise KeyError(f"{part}.{field}: not in the field table")


def yaml_key(part: str, field: str) -> str:
    """The YAML key of `part`'s dataclass field ('cpu', 'adam_params_per_s' -> 'adam_throughput')."""
    return hardware_field(part, field).key


@dataclass(frozen=True)
class SoftwareTerm:
    """One term of the software profile (profiles/software/*.yaml)."""

    key: str
    """Its YAML key, also the key of a CPU profile's deepspeed_host_costs."""
    field: str
    """The Software field."""
    dimension: str
    required: bool
    host_cost: bool
    """One of DeepSpeed's per-event host costs: `tierlab calibrate` measures it on a host into the
    CPU profile's deepspeed_host_costs, which override the software profile's value."""
    fitted: Callable[[float], str] | None = None
    """validate/fit.py fits it: the quantity string the fit writes its value as; None: not fitted."""
    steady: bool = True
    """It enters the steady step's time (False: step 1 or memory only; sim/ranges)."""


def _ms(decimals: int) -> Callable[[float], str]:
    return lambda s: f"{s * 1e3:.{decimals}f} ms"


SOFTWARE_TERMS: tuple[SoftwareTerm, ...] = (
    # fitted by validate/fit.py, in the order it reports them
    SoftwareTerm("host_dispatch_per_module", "host_dispatch_s_per_module", "seconds", True, True,
                 _ms(4)),
    SoftwareTerm("stage0_step_per_param", "stage0_step_s_per_param", "seconds", False, True,
                 _ms(4)),
    SoftwareTerm("offload_grad_copy_per_param", "offload_grad_s_per_param", "seconds", True, True,
                 _ms(4)),
    SoftwareTerm("zero3_hook_per_module", "zero3_hook_s_per_module", "seconds", True, True,
                 _ms(4)),
    SoftwareTerm("multi_rank_sync", "multi_rank_sync_s", "seconds", False, False, _ms(1)),
    SoftwareTerm("first_step_fixed", "first_step_fixed_s", "seconds", True, False,
                 lambda s: f"{s:.3f} s", steady=False),
    SoftwareTerm("first_touch_rate", "first_touch_Bps", "bytes/s", True, False,
                 lambda bps: f"{bps / 1e9:.3f} GB/s", steady=False),
    SoftwareTerm("process_baseline", "process_baseline_bytes", "bytes", True, False,
                 lambda b: f"{b / 1e9:.3f} GB", steady=False),
    # measured by `tierlab calibrate` (runner/calibrate_ds.py) or left at the profile's value
    SoftwareTerm("host_dispatch_bwd_per_module", "host_dispatch_bwd_s_per_module", "seconds",
                 False, True),
    SoftwareTerm("zero3_hook_bwd_per_module", "zero3_hook_bwd_s_per_module", "seconds", False,
                 True),
    SoftwareTerm("zero3_offload_hook_per_module", "zero3_offload_hook_s_per_module", "seconds",
                 False, True),
    SoftwareTerm("zero3_offload_hook_bwd_per_module", "zero3_offload_hook_bwd_s_per_module",
                 "seconds", False, True),
    SoftwareTerm("zero3_pageable_bwd_per_module", "zero3_pageable_bwd_s_per_module", "seconds",
                 False, True),
    SoftwareTerm("offload_accum_per_param", "offload_accum_s_per_param", "seconds", False, True),
    SoftwareTerm("offload_step_per_param", "offload_step_s_per_param", "seconds", False, True),
    SoftwareTerm("offload_step_pageable_per_param", "offload_step_pageable_s_per_param",
                 "seconds", False, True),
    SoftwareTerm("checkpoint_per_block", "checkpoint_s_per_block", "seconds", False, True),
    SoftwareTerm("checkpoint_bwd_per_block", "checkpoint_bwd_s_per_block", "seconds", False,
                 True),
    SoftwareTerm("checkpoint_carried_per_block", "checkpoint_carried_s_per_block", "seconds",
                 False, False),
    SoftwareTerm("zero3_step_per_param", "zero3_step_s_per_param", "seconds", False, True),
    SoftwareTerm("zero12_step_per_param", "zero12_step_s_per_param", "seconds", False, True),
    SoftwareTerm("zero12_hook_bwd_per_module", "zero12_hook_bwd_s_per_module", "seconds", False,
                 True),
    SoftwareTerm("overflow_scan_per_element", "overflow_scan_s_per_element", "seconds", False,
                 True),
    # how the fitted host terms follow a host's measured CPU Adam rate (sim/host_costs.py)
    SoftwareTerm("fit_adam_throughput", "fit_adam_params_per_s", "params/s", False, False),
    SoftwareTerm("host_speed_share", "host_speed_share", "count", False, False),
)
"""Every number of a software profile besides simulator_error (a factor, not a term)."""

HOST_COST_FIELDS = tuple(t.field for t in SOFTWARE_TERMS if t.host_cost)
"""Software terms that are DeepSpeed's per-event host costs: `tierlab calibrate` measures them
on a host (runner/calibrate_ds.py) into its CPU profile's `deepspeed_host_costs`, which then
override the software profile's values for that host (sim/host_costs.py)."""
SCALED_BY_HOST_SPEED = (*(t.field for t in SOFTWARE_TERMS if t.host_cost and t.fitted),
                        "checkpoint_carried_s_per_block")
"""The fitted host terms: fitted on three machines, they follow another host's measured CPU Adam
rate (Software.host_speed_share, sim/host_costs.with_host_costs) where it did not measure them;
with them the part of the dispatch term that is the checkpoint wrapper's (a share of it)."""
FITTED_TERMS = tuple(t for t in SOFTWARE_TERMS if t.fitted is not None)
"""The terms validate/fit.py fits, in the order it reports them."""


EXACT_FIELDS = frozenset(f.field for f in HARDWARE_FIELDS if f.exact)
"""Hardware fields with no default range (profiles/ranges; a stated range is still honoured)."""
NOT_STEADY = frozenset({f.field for f in HARDWARE_FIELDS if not f.steady}
                       | {t.field for t in SOFTWARE_TERMS if not t.steady})
"""Fields that do not enter the steady step (a recorded fact, memory, step 1 only; sim/ranges)."""


def software_term(field: str) -> SoftwareTerm:
    """The row of a Software field; unknown -> KeyError."""
    for t in SOFTWARE_TERMS:
        if t.field == field:
            return t
    raise KeyError(f"Software.{field}: not in the field table")
