"""Named errors of the adapter library: refusals of an upload, and object-store failures."""

from __future__ import annotations

import enum


class Rejection(enum.StrEnum):
    """Why an adapter upload was refused; the value is the short code shown to the user."""

    # Files and archives
    PICKLE_WEIGHTS = "pickle_weights"
    PATH_TRAVERSAL = "path_traversal"
    LINK_IN_ARCHIVE = "link_in_archive"
    SPECIAL_FILE = "special_file"
    BAD_ARCHIVE = "bad_archive"
    TOO_LARGE = "too_large"
    EXTRA_FILE = "extra_file"
    MISSING_FILE = "missing_file"
    # adapter_config.json
    BAD_CONFIG = "bad_config"
    NOT_LORA = "not_lora"
    DORA = "dora"
    MODULES_TO_SAVE = "modules_to_save"
    ADDED_TOKENS = "added_tokens"
    UNSUPPORTED_TARGET = "unsupported_target"
    RANK_TOO_HIGH = "rank_too_high"
    WRONG_BASE_MODEL = "wrong_base_model"
    # adapter_model.safetensors
    CORRUPT_SAFETENSORS = "corrupt_safetensors"
    UNKNOWN_TENSOR = "unknown_tensor"
    MISSING_TENSOR = "missing_tensor"
    UNSUPPORTED_DTYPE = "unsupported_dtype"
    SHAPE_MISMATCH = "shape_mismatch"
    RANK_MISMATCH = "rank_mismatch"
    NON_FINITE = "non_finite"


class AdapterRejected(Exception):
    """An adapter upload or fine-tune output that cannot be served; `message` names the culprit."""

    def __init__(self, code: Rejection, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[type[AdapterRejected], tuple[Rejection, str]]:
        """Pickle by the two arguments: checks run in worker processes (loraplex.cpu_pool)."""
        return (type(self), (self.code, self.message))


class BaseModelUnsupported(ValueError):
    """A directory that is not a Llama-style Hugging Face model with safetensors weights."""


class StoreError(Exception):
    """Base of the object-store failures."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or refused the request (endpoint down, timeout, access)."""


class ObjectMissing(StoreError):
    """No object exists under the key."""


class ObjectCorrupt(StoreError):
    """The object's bytes do not hash to the sha256 recorded when it was stored."""
