"""The one base class of the errors meant for the person at the command line.

Each module raises its own subclass (model.ModelError, helm.HelmError, ...) with a message that
names the problem; mooncake_pd.cli.main catches MooncakePdError once, prints
`<command label>: <prefix><message>` on stderr and returns the class's exit code. Standard
library only: the CLI imports it before it knows which command runs."""

from __future__ import annotations

from typing import ClassVar

# The CLI's exit codes (`mooncake-pd --help`): 2 for bad input (options, files, no cluster or
# release, a missing tool), 1 for invalid output or a failed check.
BAD_INPUT = 2
FAILED = 1


class MooncakePdError(Exception):
    """An error the CLI reports as one message and an exit code, without a traceback."""

    exit_code: ClassVar[int] = BAD_INPUT
    # Printed before the message, e.g. "helm failed:\n" before helm's own error output.
    prefix: ClassVar[str] = ""
