"""LoRA adapters: the PEFT format, validation and object stores."""

from loraplex.adapters.archive import unpack_upload
from loraplex.adapters.errors import (
    AdapterRejected,
    BaseModelUnsupported,
    ObjectCorrupt,
    ObjectMissing,
    Rejection,
    StoreError,
    StoreUnavailable,
)
from loraplex.adapters.facts import (
    BaseModelFacts,
    facts_from_json,
    facts_to_json,
    read_base_model_facts,
)
from loraplex.adapters.validation import AdapterFacts, ValidationLimits, validate_adapter_dir

__all__ = [
    "AdapterFacts",
    "AdapterRejected",
    "BaseModelFacts",
    "BaseModelUnsupported",
    "ObjectCorrupt",
    "ObjectMissing",
    "Rejection",
    "StoreError",
    "StoreUnavailable",
    "ValidationLimits",
    "facts_from_json",
    "facts_to_json",
    "read_base_model_facts",
    "unpack_upload",
    "validate_adapter_dir",
]
