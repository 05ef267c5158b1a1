"""Hostile inputs, generated: each writes the files or body one attack sends.

Sizes are chosen to show the cost on code without bounds (seconds of a held event loop,
hundreds of MB of memory) while staying quick to build and send on a 2-core host. Every
builder is deterministic.
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import tarfile
import zipfile
from pathlib import Path

from tests.support.lora_files import write_adapter

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


def _safetensors(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def _adapter_with_weights(folder: Path, header: bytes) -> list[Path]:
    """A valid tiny adapter whose weights file is replaced by `header` (and no data)."""
    write_adapter(folder)
    _safetensors(folder / WEIGHTS, header)
    return [folder / CONFIG, folder / WEIGHTS]


def big_integer_dimensions(folder: Path) -> list[Path]:
    """One tensor of 200 dimensions of 4,000 digits each (~800 kB of header): `math.prod` over
    them is one long C call holding the GIL (seconds)."""
    digits = int("7" * 4000)
    spec = {"dtype": "F32", "shape": [digits] * 200, "data_offsets": [0, 0]}
    return _adapter_with_weights(folder, json.dumps({"t": spec}).encode())


def huge_header(folder: Path) -> list[Path]:
    """A 24 MB header of ~400k tiny tensor records: ~400 MB of Python objects once decoded."""
    records = ",".join(
        f'"t{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(400_000)
    )
    return _adapter_with_weights(folder, ("{" + records + "}").encode())


def deep_header(folder: Path) -> list[Path]:
    """A header of 300k nested arrays: the JSON decoder runs out of recursion."""
    return _adapter_with_weights(folder, b"[" * 300_000 + b"]" * 300_000)


def deep_config(folder: Path) -> list[Path]:
    """An adapter_config.json of 30k nested arrays (60 kB)."""
    write_adapter(folder)
    (folder / CONFIG).write_bytes(b"[" * 30_000 + b"]" * 30_000)
    return [folder / CONFIG, folder / WEIGHTS]


def zip_with_many_entries(folder: Path, count: int = 200_000) -> list[Path]:
    """A zip whose central directory lists `count` entries (~11 MB): zipfile builds a ZipInfo
    (~535 B) for each before anyone can count them."""
    folder.mkdir(parents=True, exist_ok=True)
    directory = io.BytesIO()
    for i in range(count):
        name = f"{i:08d}".encode()
        # central directory file header: stored, zero-length, local header offset 0
        directory.write(
            struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0,
                        len(name), 0, 0, 0, 0, 0, 0) + name
        )  # fmt: skip
    body = directory.getvalue()
    # More than 65,535 entries need zip64's end records; the classic one points at them.
    end64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(body), 0)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, len(body), 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    path = folder / "adapter.zip"
    path.write_bytes(body + end64 + locator + end)
    return [path]


def tar_with_a_huge_pax_record(folder: Path) -> list[Path]:
    """A .tar.gz whose one pax record is 48 MB (it gzips to ~50 kB): tarfile reads a pax
    record into memory whole."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "adapter.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("README.md")
        info.pax_headers = {"comment": "a" * (48 * 1024 * 1024)}
        tar.addfile(info, io.BytesIO(b""))
    return [path]


def zip_bomb(folder: Path) -> list[Path]:
    """A zip of one 600 MB member of zeros (~600 kB deflated): past the 512 MB upload cap."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "adapter.zip"
    zeros = bytes(1024 * 1024)
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        zf.open("README.md", "w", force_zip64=True) as member,
    ):
        for _ in range(600):
            member.write(zeros)
    return [path]


def gzip_bomb_jsonl(folder: Path) -> list[Path]:
    """A training file that is gzip, not JSONL: refused as bad rows, never inflated."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.jsonl"
    path.write_bytes(gzip.compress(bytes(8 * 1024 * 1024)))
    return [path]


def jsonl_one_long_line(folder: Path) -> list[Path]:
    """A training file of one 48 MB line: held and decoded whole, ~8x its size."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.jsonl"
    text = "x" * (48 * 1024 * 1024)
    row = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "a"}]}
    path.write_text(json.dumps(row))
    return [path]


def jsonl_deep_line(folder: Path, depth: int = 1_000_000) -> list[Path]:
    """A training file whose line nests 1M arrays (or `depth`)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.jsonl"
    path.write_bytes(b"[" * depth + b"]" * depth + b"\n")
    return [path]


def deep_json_body() -> bytes:
    """A chat request whose `messages` nests 500k arrays deep (1 MB)."""
    return b'{"model":"m","messages":' + b"[" * 500_000 + b"]" * 500_000 + b"}"


def huge_number_body(model: str) -> bytes:
    """A chat request with a 4,300-digit `max_tokens` and a 100k-digit float."""
    digits = "9" * 4300
    return (
        f'{{"model":"{model}","max_tokens":{digits},"temperature":1.{"0" * 100_000},'
        f'"messages":[{{"role":"user","content":"hi"}}]}}'
    ).encode()


def wide_body(model: str) -> bytes:
    """A chat request of 200k one-character messages (~6 MB)."""
    messages = ",".join(['{"role":"user","content":"a"}'] * 200_000)
    return f'{{"model":"{model}","messages":[{messages}]}}'.encode()


def deep_schema_body(model: str) -> bytes:
    """A chat request whose response_format JSON Schema nests 2,000 objects."""
    depth = 2000
    schema = '{"type":"object","properties":{"a":' * depth + '{"type":"string"}' + "}}" * depth
    return (
        f'{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}],'
        f'"response_format":{{"type":"json_schema","json_schema":{{"name":"s","schema":{schema}}}}}}}'
    ).encode()


def repetition_schema_body(model: str) -> bytes:
    """A schema asking the grammar compiler to unroll a 10^9-long repetition."""
    schema = {"type": "array", "items": {"type": "string"}, "minItems": 10**9}
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }
    return json.dumps(body).encode()


# The same attacks shaped for the other routes that take a body (tests/security/test_hostile_routes.py).

HUGE_INTEGER = "9" * 4300  # the most digits Python's int() takes from text
LONG_FLOAT = "1." + "0" * 100_000
PROMPTS = {  # the part of each /v1 generation route's body that carries the prompt
    "/v1/chat/completions": '"messages":[{"role":"user","content":"hi"}]',
    "/v1/completions": '"prompt":"hi"',
    "/v1/responses": '"input":"hi"',
}
MAX_TOKENS = {
    "/v1/chat/completions": "max_tokens",
    "/v1/completions": "max_tokens",
    "/v1/responses": "max_output_tokens",
}


def deep_in(template: str, depth: int = 500_000) -> bytes:
    """`template` with `{deep}` replaced by `depth` nested arrays (2 bytes a level)."""
    head, tail = template.split("{deep}")
    return head.encode() + b"[" * depth + b"]" * depth + tail.encode()


def huge_numbers_for(route: str, model: str) -> bytes:
    """`huge_number_body` for any /v1 generation route."""
    return (
        f'{{"model":"{model}","{MAX_TOKENS[route]}":{HUGE_INTEGER},"temperature":{LONG_FLOAT},'
        f"{PROMPTS[route]}}}"
    ).encode()


def schema_for(route: str, model: str, schema: str) -> bytes:
    """A /v1 generation request of `route` asking for output matching the JSON `schema`."""
    if route == "/v1/responses":
        asked = f'"text":{{"format":{{"type":"json_schema","name":"s","schema":{schema}}}}}'
    else:
        asked = f'"response_format":{{"type":"json_schema","json_schema":{{"name":"s","schema":{schema}}}}}'
    return f'{{"model":"{model}",{PROMPTS[route]},{asked}}}'.encode()


def deep_schema(depth: int = 2000) -> str:
    """The JSON Schema of `deep_schema_body`: objects nested `depth` deep."""
    return '{"type":"object","properties":{"a":' * depth + '{"type":"string"}' + "}}" * depth


REPETITION_SCHEMA = json.dumps({"type": "array", "items": {"type": "string"}, "minItems": 10**9})


def wide_list(template: str, item: str, count: int) -> bytes:
    """`template` with `{wide}` replaced by a JSON list of `count` copies of `item`."""
    head, tail = template.split("{wide}")
    return (head + "[" + ",".join([item] * count) + "]" + tail).encode()


def wide_form(fields: int = 120_000) -> bytes:
    """A urlencoded form of `fields` empty fields (~1 MB, under the body limit): parsed field
    by field into a multi-dict."""
    return b"&".join([b"scopes="] * fields)


def many_parts(parts: int = 100_000) -> bytes:
    """A multipart/form-data body (boundary `x`) of `parts` empty fields (~5 MB), then one
    small file: each part is a round of the parser's Python callbacks."""
    field = b'--x\r\nContent-Disposition: form-data; name="f"\r\n\r\n\r\n'
    file = (
        b'--x\r\nContent-Disposition: form-data; name="file"; filename="train.jsonl"\r\n\r\n'
        b'{"messages": []}\r\n'
    )
    return field * parts + file + b"--x--\r\n"


def sign_in_form(index: int, size: int = 1_000_000) -> bytes:
    """A sign-in form of ~1 MB, different for each `index`: a parser that caches what it
    parsed keeps every one."""
    return f"email=guest-{index}%40example.com&password=".encode() + b"p" * size
