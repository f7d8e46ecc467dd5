"""What the verb modules share; it holds no verb.

``add_verb`` adds a verb's parser from its handler (named ``cmd_VERB``; its docstring is the
help; every option's default shows in it); ``client_args`` gives a client verb its connection
options and ``--format``; ``add_duration`` adds an option read by ``parse_duration`` (``1s``,
``250ms``, ``2m``...); ``options_for`` hands a verb's options to the function that takes them;
``connect`` opens the client a verb talks to the server with. Nothing here loads the client: a
verb imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.client import Client


def parse_duration(text: str) -> float:
    """'1s', '250ms', '2m', '6h', '1d' or a plain number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 1s, 250ms, 2m, 6h)")
    unit = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
    return float(m.group(1)) * unit[m.group(2)]


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (unless it has none: no value, or a flag that
    is off); descriptions keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


# Every verb is a handler ``cmd_NAME(args) -> int`` whose docstring is its help, and a function
# that adds its parser (``add_verb(sub, cmd_NAME)`` and its options). A new verb is one more such
# pair, its adder appended to ``snapview.cli.COMMANDS``.
Subparsers = Any  # argparse's _SubParsersAction, which typeshed keeps private


TEXT_JSON = ("text", "json")  # the output formats of most client verbs


def add_verb(
    sub: Subparsers,
    run: Callable[[argparse.Namespace], int],
    *,
    formats: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    """The subcommand ``run`` runs (``cmd_NAME`` is verb NAME; its return is the exit code),
    whose options show their defaults. ``run``'s docstring is its help: the first line the
    one-line summary (in ``snapview --help``), the rest, line breaks kept, the description (in
    ``snapview NAME --help``). With ``formats`` it is a client verb: it has ``client_args``
    with those output formats."""
    name = run.__name__.removeprefix("cmd_")
    summary, _, description = (inspect.getdoc(run) or name).partition("\n")
    p = sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{description.strip()}".rstrip(),
        formatter_class=Formatter,
    )
    p.set_defaults(func=run)
    if formats:
        client_args(p, formats)
    return p


def add_duration(p: argparse.ArgumentParser, flag: str, default: str, help: str, **kw: Any) -> None:
    """An option taking a duration (``parse_duration``); its default is given as text."""
    p.add_argument(flag, type=parse_duration, default=default, metavar="DURATION", help=help, **kw)


def options_for(fn: Callable[..., Any], args: argparse.Namespace, **given: Any) -> dict[str, Any]:
    """The keyword arguments of ``fn`` (a function or a dataclass) that ``args`` holds, each
    option's ``dest`` named as the parameter it fills, with ``given`` on top: a verb that
    hands its options on says which function takes them, not each option again."""
    names = inspect.signature(fn).parameters
    return {k: v for k, v in vars(args).items() if k in names} | given


def client_args(
    p: argparse.ArgumentParser, formats: tuple[str, ...] = TEXT_JSON
) -> argparse._MutuallyExclusiveGroup:
    """The options every client verb has: where the server is, how to reach it, and --format.
    ``--json`` is kept, hidden, as an alias of ``--format json``."""
    # The connection settings, as coordinator.ConnectionSettings.from_env() reads them.
    env = os.environ
    p.add_argument(
        "--address",
        "--coordinator",  # the older name
        dest="address",
        default=env.get("SNAPVIEW_ADDRESS") or env.get("SNAPVIEW_COORDINATOR") or "localhost:50051",
        metavar="HOST:PORT",
        help="address of snapview serve ($SNAPVIEW_ADDRESS overrides the default)",
    )
    p.add_argument(
        "--token-file",
        "--auth-token-file",  # the older name
        dest="token_file",
        default=env.get("SNAPVIEW_TOKEN_FILE") or None,
        metavar="FILE",
        help="file holding the server's admin or read token (default: $SNAPVIEW_TOKEN_FILE)",
    )
    p.add_argument(
        "--tls-ca",
        default=env.get("SNAPVIEW_TLS_CA") or None,
        metavar="FILE",
        help="root certificate to verify a TLS server with (default: $SNAPVIEW_TLS_CA)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--format",
        type=lambda f: "text" if f == "table" else f,  # 'table' was the old name of 'text'
        choices=formats,
        default="text",
        help="output format",
    )
    out.add_argument(
        "--json", dest="format", action="store_const", const="json", help=argparse.SUPPRESS
    )
    return out  # the output options, which exclude each other


def connect(args: argparse.Namespace) -> Client:
    import coordinator

    settings = coordinator.ConnectionSettings(
        address=args.address, token_file=args.token_file, tls_ca=args.tls_ca
    )
    # A person is waiting: give up on an unreachable server after a few seconds, not thirty.
    return coordinator.connect(
        settings, retry=coordinator.RetryPolicy(max_attempts=4, max_elapsed_s=5)
    )
