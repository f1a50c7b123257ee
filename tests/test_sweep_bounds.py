"""`sweep --vary` values pass the same bounds as the files they stand for (issue 34): a hardware
quantity the rate floor or ceiling a profile's would meet, model and ds_config counts their
bounds.py bounds, batch keys the flags' bounds; one line naming the --vary item, exit 2, before
any point is simulated (no 'internal: OverflowError' row, no silent 1e30 drives)."""
import pytest

from _cli import assert_user_error, run


@pytest.mark.parametrize("vary, fragment", [
    ("pcie.h2d_pinned=1e-300GB/s,10GB/s", "below 1000 bytes/s"),
    ("nvme.drives=0,1e30", "beyond the bound"),
    ("model.n_layers=2,1e9", "beyond the bound 10000"),
    ("micro_batch=1,2000000", "beyond the bound"),
    ("zero_optimization.sub_group_size=1e26", "beyond the bound"),
    ("aio.queue_depth=1e9", "beyond the bound"),
])
def test_vary_values_are_bounded_like_their_files(vary, fragment, tmp_path):
    out = tmp_path / "s.csv"
    result = run("sweep", "-m", "tinyllama-1.1b", "--vary", vary, "--out", str(out))
    assert_user_error(result, f"--vary {vary.split('=')[0]}=", fragment)
    assert not out.exists()


def test_vary_values_inside_the_bounds_still_run(tmp_path):
    out = tmp_path / "s.csv"
    result = run("sweep", "-m", "tinyllama-1.1b", "--vary", "nvme.drives=1,2",
                 "--vary", "pcie.h2d_pinned=20GB/s,50GB/s", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 1 + 4


def test_plot_of_a_csv_that_is_no_sweep_names_the_results_option(tmp_path):
    other = tmp_path / "r.csv"
    other.write_text("a,b\n1,nan\n")
    assert_user_error(run("plot", "sweep", "--results", str(other), "--out",
                          str(tmp_path / "p.png")), str(other), "not a tierlab sweep file",
                      "--results takes")
    assert not (tmp_path / "p.png").exists()
