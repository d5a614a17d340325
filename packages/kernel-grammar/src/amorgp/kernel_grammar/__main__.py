"""Command line: inspect a kernel expression.

``python -m amorgp.kernel_grammar "SE + PER" --dims 3`` (or ``amorgp-grammar ...``)
prints the canonical form, the per-dimension structure, the parameter table
(name, kind, transform floor, prior) and the padded encoding.  A text that does
not parse or is not in the dimension-wise space prints the reason (with a caret
under the position) and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from amorgp.kernel_grammar.dimwise import DimWiseStructure
from amorgp.kernel_grammar.encoding import encode
from amorgp.kernel_grammar.expressions import Expr
from amorgp.kernel_grammar.parser import KernelSyntaxError, parse
from amorgp.kernel_grammar.registry import (
    EXTENDED_VOCABULARY,
    NOISE,
    PAPER_VOCABULARY,
    Vocabulary,
)
from amorgp.kernel_grammar.transforms import FLOORS

__all__ = ["main", "report"]

VOCABULARIES: dict[str, Vocabulary] = {"paper": PAPER_VOCABULARY, "extended": EXTENDED_VOCABULARY}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amorgp-grammar",
        description=(
            "Parse a kernel expression of the dimension-wise space and show its canonical "
            "form, per-dimension structure, parameters and integer encoding."
        ),
        epilog=(
            "Syntax: SE, LIN, PER, MAT52, RQ combined with '+', '*' (or 'x'), parentheses; "
            "'@k' puts an atom or group on input dimension k (0-based). Without '@' the "
            "structure is the same in every dimension. Example: "
            "'(SE*LIN + SE)@0 * (SE + PER)@1'."
        ),
    )
    p.add_argument("expression", help='kernel expression, e.g. "SE + PER"')
    p.add_argument(
        "--dims",
        type=int,
        default=None,
        help="number of input dimensions (default: 1, or max '@' index + 1)",
    )
    p.add_argument(
        "--vocabulary",
        choices=[*sorted(VOCABULARIES), "auto"],
        default="auto",
        help="symbol vocabulary giving the integer ids (default: auto, the paper vocabulary "
        "where the expression fits it, else the extended one: every registered base kernel, "
        "MAT52 and RQ included, and their products)",
    )
    p.add_argument("--tree", action="store_true", help="also print the expression tree as parsed")
    return p


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [
        "  " + fmt.format(*header).rstrip(),
        "  " + "  ".join("-" * w for w in widths),
        *("  " + fmt.format(*r).rstrip() for r in rows),
    ]


def report(
    expr: Expr, structure: DimWiseStructure, vocab: Vocabulary, show_tree: bool = False
) -> str:
    """The text printed by the command for a parsed expression and its structure."""
    lines = [
        f"expression       : {expr}",
        f"canonical form   : {structure}",
        f"input dimensions : {structure.n_dims}",
        f"vocabulary       : {vocab.name} ({', '.join(vocab.symbols)})",
    ]
    if show_tree:
        lines += ["", "expression tree", *("  " + t for t in expr.tree().splitlines())]
    lines += ["", "per-dimension structure"]
    lines += [f"  dim {d}: {structure.dim_text(d)}" for d in range(structure.n_dims)]
    rows = [
        [
            str(n.dim),
            str(n.addend),
            n.symbol,
            n.param,
            spec.kind.value,
            f"softplus + {FLOORS[spec.kind]:g}",
            str(spec.prior),
        ]
        for n, spec in structure.param_specs()
    ]
    rows.append(
        [
            "-",
            "-",
            "-",
            NOISE.name,
            NOISE.kind.value,
            f"softplus + {FLOORS[NOISE.kind]:g}",
            str(NOISE.prior),
        ]
    )
    lines += [
        "",
        f"parameters ({structure.n_params} kernel + 1 noise)",
        *_table(rows, ["dim", "addend", "symbol", "parameter", "kind", "transform", "prior"]),
    ]
    symbols, mask = encode([structure], vocab)
    with np.printoptions(linewidth=100):
        lines += [
            "",
            f"encoding (vocabulary ids, 0 = padding; B={symbols.shape[0]}, "
            f"D={symbols.shape[1]}, L={symbols.shape[2]})",
            "  symbols[0] =",
            *("    " + t for t in str(symbols[0]).splitlines()),
            "  symbol_mask[0] =",
            *("    " + t for t in str(mask[0].astype(int)).splitlines()),
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m amorgp.kernel_grammar`` and ``amorgp-grammar``.

    Returns:
        0 on success; 2 for a text that does not parse or is not in the space.
    """
    args = _parser().parse_args(argv)
    names = ["paper", "extended"] if args.vocabulary == "auto" else [args.vocabulary]
    if args.dims is not None and args.dims < 1:
        print(f"error: --dims must be a positive integer, got {args.dims}", file=sys.stderr)
        return 2
    try:
        expr = parse(args.expression, args.dims)
        n_dims = args.dims if args.dims is not None or expr.is_indexed else 1
        for i, name in enumerate(names):  # auto: the first vocabulary that has every symbol
            vocab = VOCABULARIES[name]
            try:
                structure = DimWiseStructure.from_expr(expr, n_dims, vocab)
                break
            except ValueError as err:
                if "not in vocabulary" not in str(err) or i == len(names) - 1:
                    raise
    except KernelSyntaxError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        if "not in vocabulary" in str(err) and args.vocabulary == "paper":
            print(
                "hint: --vocabulary extended (or the default, auto) allows every registered "
                "base kernel, MAT52 and RQ included",
                file=sys.stderr,
            )
        return 2
    print(report(expr, structure, vocab, show_tree=args.tree))
    return 0


if __name__ == "__main__":
    sys.exit(main())
