"""unpack_upload: loose files and archives become a clean adapter directory, or are refused."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from loraplex.adapters import AdapterRejected, Rejection, unpack_upload
from tests.support.lora_files import write_adapter

CAP = 10 * 1024 * 1024
ADAPTER_FILES = ["adapter_config.json", "adapter_model.safetensors"]


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    """A valid adapter directory to pack."""
    return write_adapter(tmp_path / "src", readme=True)


def add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add a regular file member."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def add_special(tar: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    """Add a link, device or fifo member."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tar.addfile(info)


def pack_tar(path: Path, adapter: Path, prefix: str = "", mode: str = "w:gz") -> tarfile.TarFile:
    """Open a tar with the adapter's two files under `prefix`; the caller adds more and closes."""
    tar = tarfile.open(path, mode)  # noqa: SIM115 - returned open, closed by the caller
    for name in ADAPTER_FILES:
        add_file(tar, prefix + name, (adapter / name).read_bytes())
    return tar


def pack_zip(path: Path, adapter: Path, prefix: str = "") -> zipfile.ZipFile:
    """Open a zip with the adapter's two files under `prefix`; the caller adds more and closes."""
    zf = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
    for name in ADAPTER_FILES:
        zf.write(adapter / name, prefix + name)
    return zf


def refusal(sources: list[Path], dest: Path, cap: int = CAP) -> AdapterRejected:
    """Unpack, expecting a refusal; the destination must not be left behind."""
    with pytest.raises(AdapterRejected) as caught:
        unpack_upload(sources, dest, cap)
    assert not dest.exists()
    return caught.value


def test_two_loose_files_become_the_adapter_directory(tmp_path, adapter):
    dest = unpack_upload([adapter / n for n in ADAPTER_FILES], tmp_path / "out", CAP)
    assert sorted(p.name for p in dest.iterdir()) == ADAPTER_FILES
    assert (dest / "adapter_config.json").read_bytes() == (
        adapter / "adapter_config.json"
    ).read_bytes()


def test_loose_readme_is_kept(tmp_path, adapter):
    sources = [adapter / n for n in [*ADAPTER_FILES, "README.md"]]
    dest = unpack_upload(sources, tmp_path / "out", CAP)
    assert (dest / "README.md").is_file()


def test_loose_pickle_weights_are_refused(tmp_path, adapter):
    pickle = tmp_path / "adapter_model.bin"
    pickle.write_bytes(b"\x80\x04K\x01.")
    error = refusal([adapter / "adapter_config.json", pickle], tmp_path / "out")
    assert error.code == Rejection.PICKLE_WEIGHTS


def test_loose_extra_file_is_refused(tmp_path, adapter):
    extra = tmp_path / "optimizer.json"
    extra.write_text("{}")
    error = refusal([*(adapter / n for n in ADAPTER_FILES), extra], tmp_path / "out")
    assert error.code == Rejection.EXTRA_FILE
    assert "optimizer.json" in error.message


def test_loose_files_over_the_cap_are_refused(tmp_path, adapter):
    error = refusal([adapter / n for n in ADAPTER_FILES], tmp_path / "out", cap=1000)
    assert error.code == Rejection.TOO_LARGE


def test_upload_without_config_is_refused(tmp_path, adapter):
    error = refusal([adapter / "adapter_model.safetensors"], tmp_path / "out")
    assert error.code == Rejection.MISSING_FILE
    assert "adapter_config.json" in error.message


def test_tar_gz_is_unpacked(tmp_path, adapter):
    pack_tar(tmp_path / "a.tar.gz", adapter).close()
    dest = unpack_upload([tmp_path / "a.tar.gz"], tmp_path / "out", CAP)
    assert sorted(p.name for p in dest.iterdir()) == ADAPTER_FILES


def test_plain_tar_is_unpacked(tmp_path, adapter):
    pack_tar(tmp_path / "a.tar", adapter, mode="w").close()
    dest = unpack_upload([tmp_path / "a.tar"], tmp_path / "out", CAP)
    assert sorted(p.name for p in dest.iterdir()) == ADAPTER_FILES


def test_zip_is_unpacked(tmp_path, adapter):
    pack_zip(tmp_path / "a.zip", adapter).close()
    dest = unpack_upload([tmp_path / "a.zip"], tmp_path / "out", CAP)
    assert sorted(p.name for p in dest.iterdir()) == ADAPTER_FILES


def test_single_top_folder_is_unwrapped(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter, prefix="my-adapter/") as tar:
        add_file(tar, "my-adapter/README.md", b"# hi\n")
    dest = unpack_upload([tmp_path / "a.tgz"], tmp_path / "out", CAP)
    assert sorted(p.name for p in dest.iterdir()) == ["README.md", *ADAPTER_FILES]


def test_single_top_folder_in_a_zip_is_unwrapped(tmp_path, adapter):
    with pack_zip(tmp_path / "a.zip", adapter, prefix="my-adapter/") as zf:
        zf.writestr("my-adapter/", b"")
    dest = unpack_upload([tmp_path / "a.zip"], tmp_path / "out", CAP)
    assert sorted(p.name for p in dest.iterdir()) == ADAPTER_FILES


def test_files_spread_over_two_folders_are_refused(tmp_path, adapter):
    with tarfile.open(tmp_path / "a.tgz", "w:gz") as tar:
        add_file(tar, "one/adapter_config.json", (adapter / ADAPTER_FILES[0]).read_bytes())
        add_file(tar, "two/adapter_model.safetensors", (adapter / ADAPTER_FILES[1]).read_bytes())
    error = refusal([tmp_path / "a.tgz"], tmp_path / "out")
    assert error.code == Rejection.EXTRA_FILE
    assert "several folders" in error.message


def test_files_nested_two_folders_deep_are_refused(tmp_path, adapter):
    pack_tar(tmp_path / "a.tgz", adapter, prefix="outer/inner/").close()
    assert refusal([tmp_path / "a.tgz"], tmp_path / "out").code == Rejection.EXTRA_FILE


def test_entry_climbing_out_with_dotdot_is_refused(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter) as tar:
        add_file(tar, "../../etc/cron.d/evil", b"* * * * * root sh\n")
    error = refusal([tmp_path / "a.tgz"], tmp_path / "out")
    assert error.code == Rejection.PATH_TRAVERSAL
    assert "../../etc/cron.d/evil" in error.message


def test_entry_with_an_absolute_path_is_refused(tmp_path, adapter):
    with pack_zip(tmp_path / "a.zip", adapter) as zf:
        zf.writestr(zipfile.ZipInfo("/tmp/adapter_config.json"), b"{}")
    assert refusal([tmp_path / "a.zip"], tmp_path / "out").code == Rejection.PATH_TRAVERSAL


def test_symlink_in_a_tar_is_refused(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter) as tar:
        add_special(tar, "README.md", tarfile.SYMTYPE, linkname="/etc/passwd")
    error = refusal([tmp_path / "a.tgz"], tmp_path / "out")
    assert error.code == Rejection.LINK_IN_ARCHIVE
    assert "README.md" in error.message


def test_hardlink_in_a_tar_is_refused(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter) as tar:
        add_special(tar, "README.md", tarfile.LNKTYPE, linkname="adapter_config.json")
    assert refusal([tmp_path / "a.tgz"], tmp_path / "out").code == Rejection.LINK_IN_ARCHIVE


def test_symlink_in_a_zip_is_refused(tmp_path, adapter):
    with pack_zip(tmp_path / "a.zip", adapter) as zf:
        info = zipfile.ZipInfo("README.md")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    assert refusal([tmp_path / "a.zip"], tmp_path / "out").code == Rejection.LINK_IN_ARCHIVE


def test_device_file_in_a_tar_is_refused(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter) as tar:
        add_special(tar, "README.md", tarfile.CHRTYPE)
    assert refusal([tmp_path / "a.tgz"], tmp_path / "out").code == Rejection.SPECIAL_FILE


def test_fifo_in_a_tar_is_refused(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter) as tar:
        add_special(tar, "README.md", tarfile.FIFOTYPE)
    assert refusal([tmp_path / "a.tgz"], tmp_path / "out").code == Rejection.SPECIAL_FILE


def test_pickle_weights_in_an_archive_are_refused(tmp_path, adapter):
    with pack_zip(tmp_path / "a.zip", adapter) as zf:
        zf.writestr("adapter_model.pt", b"\x80\x04K\x01.")
    assert refusal([tmp_path / "a.zip"], tmp_path / "out").code == Rejection.PICKLE_WEIGHTS


def test_extra_file_in_an_archive_is_refused(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter) as tar:
        add_file(tar, "run.sh", b"#!/bin/sh\n")
    error = refusal([tmp_path / "a.tgz"], tmp_path / "out")
    assert error.code == Rejection.EXTRA_FILE
    assert "run.sh" in error.message


def test_file_appearing_twice_in_an_archive_is_refused(tmp_path, adapter):
    with pack_tar(tmp_path / "a.tgz", adapter) as tar:
        add_file(tar, "adapter_config.json", b"{}")
    assert refusal([tmp_path / "a.tgz"], tmp_path / "out").code == Rejection.EXTRA_FILE


def test_archive_over_the_cap_is_refused(tmp_path, adapter):
    pack_zip(tmp_path / "a.zip", adapter).close()
    assert refusal([tmp_path / "a.zip"], tmp_path / "out", cap=1000).code == Rejection.TOO_LARGE


def test_decompression_bomb_is_stopped_at_the_cap(tmp_path, adapter):
    # 64 MiB of zeros gzips to about 64 KiB; the cap is 1 MiB.
    bomb = tmp_path / "bomb.tar.gz"
    with pack_tar(bomb, adapter) as tar:
        info = tarfile.TarInfo("README.md")
        info.size = 64 * 1024 * 1024
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert bomb.stat().st_size < 1024 * 1024
    error = refusal([bomb], tmp_path / "out", cap=1024 * 1024)
    assert error.code == Rejection.TOO_LARGE


def test_bomb_hidden_in_a_tar_header_is_stopped_at_the_cap(tmp_path):
    # A 16 MiB pax header: no member's data ever counts against the cap, and tarfile would
    # read the whole record into memory; the header scan refuses it by its declared size.
    bomb = tmp_path / "header-bomb.tar.gz"
    with tarfile.open(bomb, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("README.md")
        info.pax_headers = {"comment": "a" * (16 * 1024 * 1024)}
        tar.addfile(info, io.BytesIO(b""))
    assert bomb.stat().st_size < 1024 * 1024
    error = refusal([bomb], tmp_path / "out", cap=1024 * 1024)
    assert error.code == Rejection.TOO_LARGE


def test_archive_with_too_many_entries_is_refused(tmp_path):
    with tarfile.open(tmp_path / "a.tgz", "w:gz") as tar:
        for _ in range(100):
            add_special(tar, "top/", tarfile.DIRTYPE)
    error = refusal([tmp_path / "a.tgz"], tmp_path / "out")
    assert error.code == Rejection.EXTRA_FILE
    assert "entries" in error.message


def test_damaged_archive_is_refused(tmp_path, adapter):
    pack_tar(tmp_path / "a.tar.gz", adapter).close()
    data = (tmp_path / "a.tar.gz").read_bytes()
    (tmp_path / "a.tar.gz").write_bytes(data[: len(data) // 2])
    assert refusal([tmp_path / "a.tar.gz"], tmp_path / "out").code == Rejection.BAD_ARCHIVE


def test_file_that_is_not_a_zip_is_refused(tmp_path):
    (tmp_path / "a.zip").write_bytes(b"PK but not really")
    assert refusal([tmp_path / "a.zip"], tmp_path / "out").code == Rejection.BAD_ARCHIVE
