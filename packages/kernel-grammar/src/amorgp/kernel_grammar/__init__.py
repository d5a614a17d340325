"""amorgp.kernel_grammar: base kernels, parameter specs, priors, transforms and the kernel grammar."""

from amorgp.kernel_grammar.dimwise import DimWiseStructure, ParamName, symbol_sort_key
from amorgp.kernel_grammar.encoding import decode, encode
from amorgp.kernel_grammar.evaluation import StructureTemplate, paper_evaluation_set
from amorgp.kernel_grammar.expressions import Atom, Expr, Product, Sum
from amorgp.kernel_grammar.parser import KernelSyntaxError, parse
from amorgp.kernel_grammar.priors import Exponential, Gamma, Prior
from amorgp.kernel_grammar.registry import (
    ALIASES,
    ELEMENTARY,
    EXTENDED_VOCABULARY,
    NOISE,
    PAPER_VOCABULARY,
    BaseSymbol,
    ElementaryKernel,
    ParamSpec,
    Vocabulary,
    base_symbol,
    canonical_symbol_name,
    register_elementary,
    unregister_elementary,
)
from amorgp.kernel_grammar.search import Move, moves, neighbours
from amorgp.kernel_grammar.transforms import FLOORS, ParamKind, positive, positive_inverse

__all__ = [
    "ALIASES",
    "ELEMENTARY",
    "Atom",
    "DimWiseStructure",
    "Expr",
    "KernelSyntaxError",
    "Move",
    "ParamName",
    "Product",
    "StructureTemplate",
    "Sum",
    "decode",
    "encode",
    "moves",
    "neighbours",
    "paper_evaluation_set",
    "parse",
    "symbol_sort_key",
    "EXTENDED_VOCABULARY",
    "FLOORS",
    "NOISE",
    "PAPER_VOCABULARY",
    "BaseSymbol",
    "ElementaryKernel",
    "Exponential",
    "Gamma",
    "ParamKind",
    "ParamSpec",
    "Prior",
    "Vocabulary",
    "base_symbol",
    "canonical_symbol_name",
    "positive",
    "positive_inverse",
    "register_elementary",
    "unregister_elementary",
]
