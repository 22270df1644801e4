"""Where the development HTTP servers listen: `mailroom web`, `mailroom
webhooks` and `mailroom unsubscribe-server` take the same `--host` and
`--port`, each with a default port of its own, so all three can run on one
machine as they come.

The spellings they had before (`webhooks --listen HOST`, `web --bind
HOST:PORT`, with its MAILROOM_CONSOLE_BIND) still work, hidden from --help, so
scripts written for them do not break; the new spelling wins when both are
given on the command line."""

from __future__ import annotations

import functools

import click
from click.core import ParameterSource

DEFAULT_HOST = "127.0.0.1"

# One port each; all three once defaulted to 8025.
DEFAULT_PORTS = {"web": 8025, "webhooks": 8026, "unsubscribe-server": 8027}

_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def parse_bind(bind: str) -> tuple[str, int]:
    """HOST:PORT (the old `web --bind`) as (host, port); [::1]:8025 for IPv6."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or not (0 <= int(port) < 65536):
        raise click.BadParameter("expected HOST:PORT, e.g. 127.0.0.1:8025", param_hint="--bind")
    return host.strip("[]") or DEFAULT_HOST, int(port)


def listen_options(command: str, *, old_listen: bool = False, old_bind_envvar: str | None = None):
    """Decorate a click command with --host and --port (default port:
    DEFAULT_PORTS[command]); the command receives the resolved `host` and
    `port`. old_listen keeps a hidden --listen HOST; old_bind_envvar keeps a
    hidden --bind HOST:PORT read from that variable too."""

    def decorate(f):
        @functools.wraps(f)
        def command_with_address(*args, host, port, old_listen_host=None, old_bind=None, **kwargs):
            ctx = click.get_current_context()
            if old_bind is not None:
                bind_host, bind_port = parse_bind(old_bind)
                host = host if ctx.get_parameter_source("host") in _GIVEN else bind_host
                port = port if ctx.get_parameter_source("port") in _GIVEN else bind_port
            if old_listen_host is not None and ctx.get_parameter_source("host") not in _GIVEN:
                host = old_listen_host
            return f(*args, host=host, port=port, **kwargs)

        options = [
            click.option("--host", default=DEFAULT_HOST, show_default=True,
                         help="Address to listen on (loopback unless told)."),
            click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORTS[command],
                         show_default=True, help="Port to listen on (0: any free port)."),
        ]
        if old_listen:
            options.append(click.option("--listen", "old_listen_host", hidden=True, help="Old spelling of --host."))
        if old_bind_envvar:
            options.append(click.option("--bind", "old_bind", hidden=True, envvar=old_bind_envvar,
                                        help="Old spelling of --host and --port together: HOST:PORT."))
        for option in reversed(options):
            command_with_address = option(command_with_address)
        return command_with_address

    return decorate
