"""loom.sim: the simulator from Python agrees with its closed forms and the CLI's model, raises
clear errors, and draws its plots."""
import os
import subprocess
import sys

import pytest

import loom.sim as sim


def test_ring_on_dedicated_links_matches_the_closed_form():
    rows = sim.collectives("mesh4", [4 << 20], algorithm="ring", post_us=0)
    assert len(rows) == 1
    r = rows[0]
    step = 2.0 + (1 << 20) / 50e3  # latency + a quarter of the buffer over 50 GB/s
    assert r["time_us"] == pytest.approx(6 * step, rel=1e-9)
    assert r["busbw_gbps"] == pytest.approx(1.5 * r["algbw_gbps"])
    assert r["bottleneck"].startswith("nvlink")
    assert r["transfers"] == 24


def test_auto_is_no_slower_than_any_loom_algorithm():
    sizes = sim.sweep(1 << 10, 1 << 26, 16)
    best = sim.collectives("p3.16xlarge", sizes, algorithm="auto")
    for algo in ("ring", "tree", "multi_tree", "star"):
        rows = sim.collectives("p3.16xlarge", sizes, algorithm=algo)
        for b, r in zip(best, rows):
            assert b["time_us"] <= r["time_us"] * (1 + 1e-12), (algo, r["bytes"])
    assert all(b["algorithm"].startswith("auto:") for b in best)


def test_mpi_exchange_runs_small_allreduces_in_the_signature_round():
    plain = sim.collectives("mesh4", [256, 4096, 1 << 20], post_us=0)
    assert not any("exchange" in r["algorithm"] for r in plain)
    mpi = sim.collectives("mesh4", [256, 4096, 1 << 20], post_us=0, mpi_exchange=True)
    assert [r["algorithm"] for r in mpi[:2]] == ["auto:exchange", "auto:split_exchange"]
    assert "exchange" not in mpi[2]["algorithm"]
    # every other schedule pays the signature round: one 2 us latency on mesh4
    star = sim.collectives("mesh4", [256], algorithm="star", post_us=0)[0]
    star_mpi = sim.collectives("mesh4", [256], algorithm="star", post_us=0, mpi_exchange=True)[0]
    assert star_mpi["time_us"] - star["time_us"] == pytest.approx(2.0, abs=1e-6)
    with pytest.raises(NotImplementedError, match="at most 2048 bytes"):
        sim.collectives("mesh4", [1 << 20], algorithm="exchange")


def test_broadcast_orders_and_in_place():
    # 2 ranks sharing 4 GB/s: a 1 MiB broadcast down the tree moves 1 MiB to the child and,
    # out of place, the root copies 1 MiB into its own buffer as well
    host = "host:2:cores=2:latency=3:copy=4:reduce=2:mem=4"
    mib = (1 << 20) / 4e3  # us for 1 MiB at 4 GB/s

    def bcast(**kw):
        return sim.collectives(host, [1 << 20], op="broadcast", algorithm="tree", post_us=0,
                               **kw)[0]["time_us"]

    # in place: the message alone; out of place: the root's copy beside it, the shared 4 GB/s
    # busy with both from the start; the older order: the copy, then the message
    assert bcast(in_place=True) == pytest.approx(3 + mib, rel=1e-9)
    assert bcast() == pytest.approx(2 * mib, rel=1e-9)
    assert bcast(root_copy_first=True) == pytest.approx(3 + 2 * mib, rel=1e-9)
    with pytest.raises(ValueError, match="allgather does not run in place"):
        sim.collectives(host, [1 << 20], op="allgather", algorithm="ring", in_place=True)


def test_native_is_the_in_process_pass_over_shared_memory():
    host = "host:2:cores=2:latency=3:copy=4:reduce=2:mem=8"
    # 2 MiB on 2 ranks: each rank sums both inputs of half the blocks (1 MiB) in L1, one
    # reduction at 2 GB/s, and stores the sums to both outputs (half a copy each: 1 MiB at
    # 4 GB/s), plus the call; no message, so no latency
    r = sim.collectives(host + ":native=pass", [2 << 20], algorithm="native", post_us=0,
                        call_us=0.5)[0]
    assert r["time_us"] == pytest.approx(0.5 + (1 << 20) / 2e3 + (1 << 20) / 4e3, rel=1e-9)
    assert sim.collectives(host + ":native=pass", [2 << 20], post_us=0)[0]["algorithm"] == \
        "auto:native"
    with pytest.raises(NotImplementedError, match="native=pass"):
        sim.collectives(host, [2 << 20], algorithm="native")


def test_scaling_rows_and_weak_scaling():
    rows = sim.scaling("4x8:dgx-a100:4x100Gb", "resnet50", [1, 8, 32])
    assert [r["devices"] for r in rows] == [1, 8, 32]
    assert [r["nodes"] for r in rows] == [1, 1, 4]
    assert rows[0]["efficiency"] == pytest.approx(1.0)
    assert rows[0]["samples_per_s"] == pytest.approx(1200.0)
    for r in rows[1:]:
        assert 0 < r["efficiency"] <= 1
        assert r["step_us"] >= r["compute_us"]
        assert r["samples_per_s"] == pytest.approx(r["devices"] * 256 / (r["step_us"] * 1e-6))


def test_model_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"name": "tiny", "batch_per_device": 10, "samples_per_s": 1000, '
                    '"gradients": [{"elements": 262144}, {"elements": 262144}]}')
    rows = sim.scaling("mesh4", str(path), [1, 4], algorithm="ring")
    assert rows[0]["step_us"] == pytest.approx(10000.0)
    assert rows[1]["buckets"] == 1


def test_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="nosuchbox"):
        sim.collectives("nosuchbox", [1024])
    with pytest.raises(ValueError, match="butterfly"):
        sim.collectives("mesh4", [1024], algorithm="butterfly")
    with pytest.raises(ValueError, match="efficiency"):
        sim.collectives("mesh4", [1024], efficiency=0)
    with pytest.raises(ValueError, match="alexnet"):
        sim.scaling("mesh4", "alexnet", [1])
    with pytest.raises(ValueError, match="whole nodes"):
        sim.scaling("2x8:dgx-a100:1x100Gb", "resnet50", [12])
    with pytest.raises(ValueError):
        sim.sweep(8, 4)


def test_plots_are_pngs(tmp_path):
    rows = sim.collectives("dgx-a100", sim.sweep(1 << 16, 1 << 24, 16), algorithm="nccl")
    out = tmp_path / "busbw.png"
    sim.plot_busbw({"nccl": rows}, str(out), title="dgx-a100")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    steps = sim.scaling("2x8:dgx-a100:4x100Gb", "resnet50", [1, 8, 16])
    out2 = tmp_path / "scaling.png"
    sim.plot_scaling({"resnet50": steps}, str(out2))
    assert out2.stat().st_size > 1000
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def test_plot_json_draws_what_loom_simulate_writes(tmp_path):
    """The file `loom simulate --plot` hands over: both kinds drawn; a wrong kind named."""
    import json
    data = tmp_path / "d.json"
    for kind, points in (("busbw", [[1024, 0.5], [1 << 20, 40.0]]), ("scaling", [[1, 100], [8, 93.5]])):
        data.write_text(json.dumps({"kind": kind, "title": "t",
                                    "series": [{"name": "a", "points": points}]}))
        out = tmp_path / (kind + ".png")
        sim.plot_json(str(data), str(out))
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data.write_text(json.dumps({"kind": "pie", "series": []}))
    with pytest.raises(ValueError, match="pie"):
        sim.plot_json(str(data), str(tmp_path / "x.png"))
    assert not (tmp_path / "x.png").exists()


def test_auto_asks_the_simulator_unless_told_otherwise():
    """The module makes the simulator auto's cost model; LOOM_AUTO_COST_MODEL=formulas keeps
    the formulas; another value fails the import naming the variable."""
    assert sim.auto_cost_model() == "sim"
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(sim.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [env.get("PYTHONPATH")] if p])
    code = "import loom.sim as s; print(s.auto_cost_model())"
    for value, expect in (("formulas", "formulas"), ("sim", "sim")):
        env["LOOM_AUTO_COST_MODEL"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expect
    env["LOOM_AUTO_COST_MODEL"] = "bogus"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    assert "LOOM_AUTO_COST_MODEL 'bogus'" in out.stderr


def test_module_entry_point(tmp_path):
    env = dict(os.environ)
    # The package this test imported, whichever way it was put on the path.
    here = os.path.dirname(os.path.dirname(os.path.abspath(sim.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [env.get("PYTHONPATH")] if p])
    out = tmp_path / "m.png"
    ok = subprocess.run([sys.executable, "-m", "loom.sim", "busbw", "mesh4", "ring,tree", str(out),
                         "1024", "1048576"], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert out.exists()
    bad = subprocess.run([sys.executable, "-m", "loom.sim", "busbw", "nosuchbox", "ring",
                          str(tmp_path / "x.png")], env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "nosuchbox" in bad.stderr
    usage = subprocess.run([sys.executable, "-m", "loom.sim"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert usage.returncode == 2 and "usage" in usage.stderr
