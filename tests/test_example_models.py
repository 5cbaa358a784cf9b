"""examples/models: real models' embedding configurations written with tpuemb.

Each ``.py`` spec compiles to its committed ``.pbtxt`` (``tpuemb compile --check``) and to the
bytes TensorFlow 2.21 builds from the same spec text with TensorFlow's classes
(``tests/data/models/generate.py``); the result is formatted, validates clean and has the sizes
its model's code sets."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, run_cli

from tpuemb_cfg.embedding.spec import load_spec
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.model.derived import derive, device_share
from tpuemb_cfg.session import prepare

MODELS = EXAMPLES / "models"
SPECS = ["dlrm_criteo", "dcnv2_mlperf"]


@pytest.mark.parametrize("model", SPECS)
def test_spec_compiles_to_the_committed_configuration(model: str) -> None:
    result = run_cli("compile", str(MODELS / f"{model}.py"), "-o", str(MODELS / f"{model}.pbtxt"),
                     "--check")
    assert result.exit_code == 0, result.output
    assert run_cli("fmt", "--check", str(MODELS / f"{model}.pbtxt")).exit_code == 0
    validated = run_cli("validate", str(MODELS / f"{model}.pbtxt"))
    assert validated.exit_code == 0 and validated.output == "", validated.output


@pytest.mark.parametrize("model", SPECS)
def test_spec_compiles_to_tensorflows_bytes(model: str) -> None:
    tensorflow = (EXAMPLES.parent / "tests" / "data" / "models" / f"{model}.binpb").read_bytes()
    assert load_spec(MODELS / f"{model}.py").compile().config.SerializeToString() == tensorflow


def test_dlrm_criteo_sizes() -> None:
    config = load(str(MODELS / "dlrm_criteo.pbtxt"))
    assert [t.name for t in config.table_descriptor] == [
        f"embedding_table_{i}" for i in (0, 10, 11, 19, 20, 21, 22, 9)]
    assert {t.dimension for t in config.table_descriptor} == {64}
    assert [list(f.input_shape) for f in config.feature_descriptor] == [[2048]] * 8
    assert (config.num_hosts, config.num_tensor_cores) == (1, 8)
    prepared = prepare(str(MODELS / "dlrm_criteo.py"))
    assert {f.combiner for f in prepared.plan.features} == {"mean"}
    assert {f.ids_per_bag for f in prepared.plan.features} == {1}
    assert prepared.plan.num_learning_rates == 1  # WarmUpAndPolyDecay, one tag
    share = device_share(config, derive(config))
    assert share is not None and share.bytes < 16 * 2**30  # fits a v3 TensorCore's 16 GiB


def test_dcnv2_mlperf_sizes() -> None:
    config = load(str(MODELS / "dcnv2_mlperf.pbtxt"))
    assert len(config.table_descriptor) == 9
    assert {t.dimension for t in config.table_descriptor} == {128}
    prepared = prepare(str(MODELS / "dcnv2_mlperf.py"))
    assert {f.combiner for f in prepared.plan.features} == {"sum"}
    bags = {f.name: f.ids_per_bag for f in prepared.plan.features}
    assert bags == {"0": 3, "10": 3, "11": 8, "19": 12, "1": 2, "20": 100, "21": 27, "22": 10,
                    "9": 7}
    derived = derive(config)
    from tpuemb_cfg.model.derived import host_sizes

    largest = max(r.estimate_bytes for r in host_sizes(config, derived))
    assert round(largest / 2**30) == 73  # GiB per host, as the issue measured
    result = run_cli("validate", "--tpu", "v5e", str(MODELS / "dcnv2_mlperf.pbtxt"))
    assert "warning[SIZE004]" in result.output  # 18.2 GiB a chip: more than a v5e holds
    assert "warning[SIZE004]" not in run_cli(
        "validate", "--tpu", "v6e", str(MODELS / "dcnv2_mlperf.pbtxt")).output
