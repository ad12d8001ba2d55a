from pathlib import Path

import pytest

from inferopt.config import load_config
from inferopt.locate.hardware import hardware_cache_dir, load_hardware

HW_DIR = Path(__file__).resolve().parents[2] / "configs" / "hardware"
EXPECTED = {"cpu", "h100-sxm", "h200", "a100-80gb", "l4", "l40s"}


@pytest.mark.parametrize("path", sorted(HW_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_hardware_yaml_validates(path):
    cfg = load_config(path, kind="hardware")
    assert cfg.name == path.stem
    assert cfg.peak_flops_per_s["float32"] > 0 and cfg.mem_bandwidth_bytes_per_s > 0
    if cfg.kind == "gpu":
        assert not cfg.measure_at_runtime
        assert cfg.peak_flops_per_s["bfloat16"] > cfg.peak_flops_per_s["float32"]
        assert "datasheet" in cfg.source and "estimate" in cfg.source


def test_every_expected_hardware_file_exists():
    assert EXPECTED <= {p.stem for p in HW_DIR.glob("*.yaml")}


def test_spec_profile_from_config():
    cfg = load_config(HW_DIR / "h100-sxm.yaml", kind="hardware")
    prof = load_hardware(cfg, "bfloat16", threads=1)
    assert not prof.measured and prof.peak_flops_per_s == pytest.approx(989.4e12)
    assert prof.ridge_flop_per_byte == pytest.approx(989.4e12 / 3.35e12)
    with pytest.raises(ValueError, match="fp4"):
        load_hardware(cfg, "fp4", threads=1)


def test_runtime_measurement_is_positive_cached_and_restores_threads(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("INFEROPT_CACHE", str(tmp_path))
    cfg = load_config(HW_DIR / "cpu.yaml", kind="hardware")
    before = torch.get_num_threads()
    prof = load_hardware(cfg, "float32", threads=1)
    assert torch.get_num_threads() == before
    assert prof.measured, prof.source
    assert prof.peak_flops_per_s > 1e8 and prof.mem_bandwidth_bytes_per_s > 1e8 and prof.memory_bytes > 1e9
    files = list(hardware_cache_dir().glob("*-cpu-float32-t1.json"))
    assert len(files) == 1 and str(hardware_cache_dir()).startswith(str(tmp_path))
    again = load_hardware(cfg, "float32", threads=1)
    assert again.peak_flops_per_s == prof.peak_flops_per_s and again.source.startswith("cached")
