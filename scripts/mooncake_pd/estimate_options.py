"""The estimate's options for an architecture it does not know, shared by generate and update.

A module of its own so that `update` builds its parser without importing the generate command
(each command's module is loaded only when it runs: tests/test_cli_render.py)."""

from __future__ import annotations

import argparse

from mooncake_pd import cli
from mooncake_pd import model as modelmod


def add(parser: argparse.ArgumentParser, *, recorded: str = "") -> None:
    """The estimate's inputs for an architecture it does not know (also update's)."""
    parser.add_argument(
        "--architecture",
        metavar="NAME",
        help="estimate the model as this known architecture (config.json's architectures[0] otherwise), for one "
        "the estimate does not know whose config.json has the known one's fields; known: "
        + ", ".join(modelmod.KNOWN_ARCHITECTURES)
        + recorded,
    )
    parser.add_argument(
        "--kv-bytes-per-token",
        type=cli.positive_int,
        metavar="N",
        help="KV-cache bytes of one token for the whole model at TP 1 (all layers, all KV heads), split over TP "
        "on each device, instead of the estimate's; with --weights-gib, for an architecture it does not know"
        + recorded,
    )
    parser.add_argument(
        "--weights-gib",
        type=cli.positive_float,
        metavar="GIB",
        help="GiB of weights of the whole model as loaded (its checkpoint's size), split over TP on each device, "
        "instead of the estimate's" + recorded,
    )
