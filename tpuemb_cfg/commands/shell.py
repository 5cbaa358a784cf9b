"""`tpuemb completion SHELL`: print the completion script click generates for the shell."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from tpuemb_cfg.cli import main


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash:  eval "$(tpuemb completion bash)"    (add to ~/.bashrc)
    zsh:   eval "$(tpuemb completion zsh)"     (add to ~/.zshrc)
    fish:  tpuemb completion fish > ~/.config/fish/completions/tpuemb.fish
    """

    cls = get_completion_class(shell)
    assert cls is not None  # click knows all three choices
    click.echo(cls(main, {}, "tpuemb", "_TPUEMB_COMPLETE").source())
