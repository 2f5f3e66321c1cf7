"""Former home of the structured hinge losses, kept so that old imports work: they are in
:mod:`structtorch.losses`, between the structures and the modules."""

from ..losses import REDUCTIONS, Structure, StructuredHingeLoss, structure_of, structured_hinge

__all__ = ["StructuredHingeLoss", "structured_hinge", "Structure", "structure_of", "REDUCTIONS"]
