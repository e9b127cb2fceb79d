"""The registry's service-account policy engine (registry-policy), for Python."""

from typing import Any, Dict, List, Mapping, Optional, Union

__version__: str

Document = Union[Mapping[str, Any], str, "Policy"]

class PolicyError(ValueError):
    """A document that is not a valid policy."""

    errors: List[Dict[str, str]]
    """Every problem found: ``{"pointer": RFC 6901 pointer into the document, "message": str}``."""

class Policy:
    """A parsed, compiled policy document (version 1 or 2)."""

    def __init__(self, document: Document) -> None: ...
    @property
    def version(self) -> int:
        """2 when the document's ``$schema`` names the version-2 schema, else 1."""
        ...
    def evaluate(
        self,
        claims: Optional[Mapping[str, Any]],
        service: Optional[str],
        ip: Optional[object] = None,
        action: Optional[str] = None,
    ) -> bool: ...
    def explain(
        self,
        claims: Optional[Mapping[str, Any]],
        service: Optional[str] = None,
        ip: Optional[object] = None,
        action: Optional[str] = None,
    ) -> Dict[str, Any]: ...

def lint(document: Document) -> List[Dict[str, str]]: ...
def compare(old: Document, new: Document) -> Dict[str, Any]:
    """Bounded; raises KeyboardInterrupt when interrupted."""
    ...
