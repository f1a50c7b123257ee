"""Properties of the simulator (hypothesis): monotone in every capacity, bounded, deterministic."""
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.profiles.load import load_software
from tierlab.sim import simulate
from tests._simhelp import PRESETS, scenario

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
factor = st.floats(min_value=1.0, max_value=8.0)


def faster(hw, pcie=1.0, cpu=1.0, nvme=1.0, gpu=1.0, net=1.0):
    p = hw.pcie
    pcie_hw = replace(p, h2d_pinned_Bps=p.h2d_pinned_Bps * pcie, d2h_pinned_Bps=p.d2h_pinned_Bps * pcie,
                      h2d_pageable_Bps=p.h2d_pageable_Bps * pcie,
                      d2h_pageable_Bps=p.d2h_pageable_Bps * pcie,
                      switch_uplink_Bps=p.switch_uplink_Bps * pcie if p.switch_uplink_Bps else None)
    c = replace(hw.cpu, adam_params_per_s=hw.cpu.adam_params_per_s * cpu,
                dram_bandwidth_Bps=hw.cpu.dram_bandwidth_Bps * cpu)
    d = replace(hw.nvme, read_bandwidth_Bps=hw.nvme.read_bandwidth_Bps * nvme,
                write_bandwidth_Bps=hw.nvme.write_bandwidth_Bps * nvme,
                aio_points=tuple((b, q, p, r * nvme, w * nvme)
                                 for b, q, p, r, w in hw.nvme.aio_points))
    g = replace(hw.gpu, peak_flops={k: v * gpu for k, v in hw.gpu.peak_flops.items()},
                hbm_bandwidth_Bps=hw.gpu.hbm_bandwidth_Bps * gpu)
    n = replace(hw.network, nic_bandwidth_Bps=hw.network.nic_bandwidth_Bps * net)
    return replace(hw, pcie=pcie_hw, cpu=c, nvme=d, gpu=g, network=n)


BASE = {p: scenario(p, gpus=2, nodes=2) for p in PRESETS}


@SETTINGS
@given(preset=st.sampled_from(PRESETS), pcie=factor, cpu=factor, nvme=factor, gpu=factor,
       net=factor)
def test_more_capacity_is_never_slower(preset, pcie, cpu, nvme, gpu, net):
    hw, m, s = BASE[preset]
    slow = simulate(hw, m, s)
    fast = simulate(faster(hw, pcie, cpu, nvme, gpu, net), m, s)
    assert fast.step_time_s <= slow.step_time_s * (1 + 1e-12)
    assert fast.first_step_time_s <= slow.first_step_time_s * (1 + 1e-12)


@SETTINGS
@given(preset=st.sampled_from(PRESETS), micro_batch=st.integers(1, 8),
       grad_accum=st.integers(1, 3), seq=st.sampled_from([128, 512, 2048]),
       checkpointing=st.booleans())
def test_step_is_at_least_the_roofline_and_deterministic(preset, micro_batch, grad_accum, seq,
                                                         checkpointing):
    args = scenario(preset, micro_batch=micro_batch, grad_accum=grad_accum, seq=seq,
                    checkpointing=checkpointing)
    a, b = simulate(*args), simulate(*args)
    assert a.step_time_s >= a.lower_bound_s * (1 - 1e-12)
    assert a.to_dict() == b.to_dict()
    assert sum(a.exposed_s.values()) == pytest.approx(a.step_time_s, rel=1e-9)


@SETTINGS
@given(k=st.floats(min_value=0.25, max_value=4.0))
def test_nvme_bound_step_scales_inversely_with_nvme_bandwidth(k):
    # everything but the NVMe made 100x faster: the step is the swap traffic
    hw, m, s = scenario("zero3-nvme", sets=("aio.queue_depth=128", "aio.block_size=8388608"))
    hw = faster(hw, pcie=100, cpu=100, gpu=100)
    # the host-side time (ZeRO-3 hooks, kernel dispatch; software profile) is not hardware:
    # switch it off too
    sw = replace(load_software(), zero3_hook_s_per_module=0.0, host_dispatch_s_per_module=0.0)
    base = simulate(hw, m, s, software=sw).step_time_s
    scaled = simulate(faster(hw, nvme=k), m, s, software=sw).step_time_s
    assert scaled * k == pytest.approx(base, rel=0.1)
