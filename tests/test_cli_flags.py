"""The library names its own parameters in messages; the CLI prints the option that sets each."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from tpuemb_cfg.base.errors import InputError, UsageError, parameter
from tpuemb_cfg.commands.flags import FLAGS, cli_message
from tpuemb_cfg.simulate import MultiWorkerRun


def test_a_marked_parameter_reads_as_its_name_or_as_its_option() -> None:
    workers = parameter("workers")
    error = UsageError(f"{workers} 0: expected 1 or more; use {workers} 1")
    assert str(error) == "workers 0: expected 1 or more; use workers 1"
    assert error.parameters == ("workers",)
    assert cli_message(error) == "--workers 0: expected 1 or more; use --workers 1"
    located = InputError(f"too large for {parameter('steps')}", path="c.pbtxt", line=2, column=3)
    assert str(located) == "c.pbtxt:2:3: error: too large for steps"
    assert cli_message(located) == "c.pbtxt:2:3: error: too large for --steps"


def test_every_flag_is_an_option_of_a_command() -> None:
    import click

    from tpuemb_cfg.cli import main

    options = set()
    with click.Context(main) as ctx:
        for name in main.list_commands(ctx):
            command = main.get_command(ctx, name)
            assert command is not None
            options.update(o for p in command.params for o in p.opts)
    assert set(FLAGS.values()) <= options, set(FLAGS.values()) - options


def test_multiworker_refusals_name_the_python_parameter() -> None:
    with pytest.raises(UsageError) as info:
        MultiWorkerRun(EXAMPLES / "quickstart.pbtxt", workers=2, max_staleness=1, init_tokens=3)
    assert str(info.value).startswith("init_tokens applies to synchronous replicas, not to "
                                      "DropStale mode (max_staleness)")
    assert info.value.parameters == ("init_tokens", "max_staleness")
    assert cli_message(info.value).startswith(
        "--init-tokens applies to synchronous replicas, not to DropStale mode (--max-staleness)")


def test_rule_selectors_name_select_and_ignore() -> None:
    from conftest import run_cli

    from tpuemb_cfg.validation.validator import selected_rules

    with pytest.raises(UsageError, match="^ignore 'NOPE' matches no rule"):
        selected_rules(ignore="NOPE")
    result = run_cli("validate", "--ignore", "NOPE", str(EXAMPLES / "quickstart.pbtxt"))
    assert result.exit_code == 2
    assert result.output.startswith("--ignore 'NOPE' matches no rule; rule ids look like TAG002")


def test_combiner_refusals_name_combiners() -> None:
    from tpuemb_cfg.executor import parse_combiners

    with pytest.raises(UsageError) as info:
        parse_combiners(["x=sum"], 2)
    assert str(info.value) == ("combiners 'x=sum': 'x' is not a feature index; use combiners NAME "
                               "or combiners FEATURE_INDEX=NAME")
    assert cli_message(info.value) == ("--combiner 'x=sum': 'x' is not a feature index; use "
                                       "--combiner NAME or --combiner FEATURE_INDEX=NAME")


def test_the_memory_hint_names_the_tables_parameter() -> None:
    from tpuemb_cfg.executor.memory import Estimate, reduce_hint

    hint = reduce_hint(Estimate(state=100, steady=1, peak=1, whole_state=400), tables="all")
    error = UsageError(f"too large; {hint}")
    assert str(error) == ("too large; write only the touched rows (tables touched) or reduce "
                          "vocabulary_size/dimension")
    assert cli_message(error).startswith("too large; write only the touched rows (--tables "
                                         "touched)")


def test_the_ray_install_hint_names_the_backend_parameter() -> None:
    from tpuemb_cfg.backends.ray.connection import INSTALL_HINT

    error = UsageError(INSTALL_HINT)
    assert str(error).startswith("backend ray needs Ray, which is not installed")
    assert str(error).endswith("or use backend local")
    assert cli_message(error).startswith("--backend ray needs Ray, which is not installed")
    assert cli_message(error).endswith("or use --backend local")


def test_a_file_that_is_no_checkpoint_names_checkpoint_every() -> None:
    from tpuemb_cfg.simulate import SyntheticRun

    run = SyntheticRun(str(EXAMPLES / "quickstart.pbtxt"), seed=1, engine="numpy")
    with pytest.raises(InputError) as info:
        run.restore({}, "c.npz")
    assert str(info.value).endswith("a run with checkpoint_every wrote")
    assert cli_message(info.value).endswith("a run with --checkpoint-every wrote")
