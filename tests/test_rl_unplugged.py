"""RL Unplugged Atari conversion, on shards written by TensorFlow's own TFRecordWriter in DeepMind's format."""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tqdm import tqdm

from conftest import modules_imported_by, run_in_process, run_repo_script, script_env
from offline_rl.core.errors import OfflineRLError
from offline_rl.data import load_buffer
from offline_rl.data.frame_pool import FramePoolBuffer
from offline_rl.data.rl_unplugged.example import ExampleError, parse_example
from offline_rl.data.rl_unplugged.frames import decode_frame
from offline_rl.data.rl_unplugged.records import parse_transition
from offline_rl.data.rl_unplugged.shard_converter import ShardError, convert_shard
from offline_rl.data.rl_unplugged.testing import (
    encode_png,
    random_episode,
    read_shard_with_tensorflow,
    serialize,
    shuffled_records,
    transition_fields,
    write_shard,
)
from offline_rl.data.rl_unplugged.tfrecord import read_records

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("the RL Unplugged tests need the rlu extra: pip install -e '.[test,rlu]'", allow_module_level=True)


class _TensorFlow:
    """TensorFlow, imported by the first test that uses it: collecting this file (which every
    pytest-xdist worker does) then costs no TensorFlow start."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # what collection asks of every object in the module (pytest's `_mock_name`)
            raise AttributeError(name)
        return getattr(importlib.import_module("tensorflow"), name)


tf = _TensorFlow()


def episodes(seed: int, specs: list[tuple[int, bool]], first_id: int = 0):
    rng = np.random.default_rng(seed)
    return [random_episode(rng, first_id + i, steps, terminal) for i, (steps, terminal) in enumerate(specs)]


def write_fields(path: Path, fields: list[dict]) -> Path:
    write_shard(path, [serialize(f) for f in fields])
    return path


@pytest.fixture
def mixed_shard(tmp_path: Path) -> Path:
    """Three episodes interleaved out of order, one ending at a terminal, with a negative int64 episode id."""
    eps = episodes(1, [(23, True), (17, False), (30, False)], first_id=-3)
    return write_fields(tmp_path / "run_1-00007-of-00100", shuffled_records(eps, seed=3))


def transition_key(obs, act, rew, terminated, obs_next) -> tuple:
    return (np.asarray(obs).tobytes(), int(act), float(rew), bool(terminated), np.asarray(obs_next).tobytes())


def reference_multiset(path: Path) -> list[tuple]:
    return sorted(
        transition_key(r["o_t"], r["a_t"], r["r_t"], r["d_t"] == 0.0, r["o_tp1"])
        for r in read_shard_with_tensorflow(path)
    )


def buffer_multiset(buffer: FramePoolBuffer) -> list[tuple]:
    batch = buffer[np.arange(len(buffer))]
    return sorted(
        transition_key(batch.obs[i], batch.act[i], batch.rew[i], batch.terminated[i], batch.obs_next[i])
        for i in range(len(buffer))
    )


# --- the reader is TensorFlow's parser, without TensorFlow ---------------------------------------


def test_reader_yields_what_tensorflow_parses(mixed_shard: Path) -> None:
    ours = []
    for record in read_records(mixed_shard):
        assert record.data is not None, record.problem
        ours.append(parse_transition(record.data))
    theirs = list(read_shard_with_tensorflow(mixed_shard))
    assert len(ours) == len(theirs) == 23 + 17 + 30
    for mine, ref in zip(ours, theirs, strict=True):
        assert np.array_equal(np.stack([decode_frame(p) for p in mine.o_t]), ref["o_t"])
        assert np.array_equal(np.stack([decode_frame(p) for p in mine.o_tp1]), ref["o_tp1"])
        assert mine.a_t == ref["a_t"] and mine.a_tp1 == ref["a_tp1"]
        assert np.float32(mine.r_t) == ref["r_t"] and np.float32(mine.d_t) == ref["d_t"]
        assert np.float32(mine.episode_return) == ref["episode_return"]
        assert np.uint64(mine.episode_id) == ref["episode_id"]  # int64 -3.. bit-cast to uint64, as DeepMind's reader
    assert any(t.episode_id > 2**63 for t in ours)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire_type)
    return key + (_varint(len(payload)) + payload if wire_type == 2 else payload)


def _entry(name: str, feature: bytes, extra: bytes = b"") -> bytes:
    return _field(1, 2, _field(1, 2, name.encode()) + _field(2, 2, feature) + extra)


_INTS = _field(3, 2, _field(1, 0, _varint(7)) + _field(1, 0, _varint(2**64 - 2)))  # unpacked 7, -2
_FLOAT = _field(2, 2, _field(1, 5, struct.pack("<f", 0.25)))  # unpacked 0.25
_STALE = _field(3, 2, _field(1, 2, _varint(99)))  # packed [99]
UNUSUAL_EXAMPLES = {
    "unpacked numbers": _field(1, 2, _entry("ints", _INTS) + _entry("f", _FLOAT)),
    "repeated key": _field(1, 2, _entry("ints", _STALE) + _entry("ints", _INTS)),
    "features twice": _field(1, 2, _entry("f", _FLOAT)) + _field(1, 2, _entry("ints", _INTS)),
    "unknown field in Example": _field(1, 2, _entry("ints", _INTS)) + _field(5, 2, b"ignored"),
    "unknown field in Feature": _field(1, 2, _entry("ints", _INTS + _field(4, 0, _varint(1)))),
    "value before key": _field(1, 2, _field(1, 2, _field(2, 2, _INTS) + _field(1, 2, b"ints"))),
    "two lists in a Feature": _field(1, 2, _entry("ints", _STALE + _FLOAT)),
    "empty Feature": _field(1, 2, _entry("ints", b"")),
    "unknown field in Features": _field(1, 2, _entry("ints", _INTS) + _field(9, 0, _varint(1))),
    "unknown field in a map entry": _field(1, 2, _entry("ints", _INTS, extra=_field(3, 0, _varint(1)))),
    "unknown field in a list": _field(
        1, 2, _entry("ints", _field(3, 2, _field(1, 0, b"\x07") + _field(2, 0, b"\x01")))
    ),
    # -2's ten-byte varint with bits past the 64th set in its last byte (0x5d, not 0x01): found by mutation
    "bits past 64 in a varint": _field(
        1,
        2,
        _entry("ints", _field(3, 2, _field(1, 0, _varint(7)) + _field(1, 0, bytes.fromhex("feffffffffffffffff5d")))),
    ),
}


MALFORMED_EXAMPLES = {
    "truncated": _field(1, 2, _entry("ints", _INTS))[:-2],
    "unknown field in a bytes list": _field(
        1, 2, _entry("b", _field(1, 2, _field(1, 2, b"x") + _field(2, 0, b"\x01")))
    ),
    "an unpacked float cut short": _field(1, 2, _entry("f", _field(2, 2, b"\x0d\x00\x00"))),
    "a packed int64 list cut inside a value": _field(1, 2, _entry("ints", _field(3, 2, _field(1, 2, b"\x07\x80")))),
    "a fixed64 field runs past the message": _field(1, 2, _entry("ints", _INTS)) + _field(5, 1, b"\x00\x00"),
}
"""Encodings that TensorFlow refuses too; each reaches another of the parser's checks."""


@pytest.mark.parametrize("case", sorted(UNUSUAL_EXAMPLES.keys() | MALFORMED_EXAMPLES.keys()))
def test_example_parser_agrees_with_tensorflow_on_unusual_encodings(case: str) -> None:
    serialized = UNUSUAL_EXAMPLES.get(case) or MALFORMED_EXAMPLES[case]
    spec = {
        "ints": tf.io.VarLenFeature(tf.int64),
        "f": tf.io.VarLenFeature(tf.float32),
        "b": tf.io.VarLenFeature(tf.string),
    }
    try:
        theirs = tf.io.parse_example([serialized], spec)
    except (tf.errors.InvalidArgumentError, UnicodeDecodeError):  # TensorFlow refuses it: so must we
        with pytest.raises(ExampleError):
            parse_example(serialized)
        return
    assert case not in MALFORMED_EXAMPLES, "TensorFlow read it"
    ours = parse_example(serialized)
    for name, expected_kind in (("ints", "int64"), ("f", "float"), ("b", "bytes")):
        values = theirs[name].values.numpy().tolist()
        feature = ours.get(name)
        got = list(feature.values) if feature is not None and feature.kind == expected_kind else []
        assert got == values, name


def test_a_damaged_example_is_an_example_error_and_nothing_else() -> None:
    """A record whose checksum happens to match yet whose bytes are wrong (a bad copy of a shard, a
    writer's bug) stops the conversion with `ExampleError`, which the converter reports in one line
    (and `--skip-corrupt` skips), never an IndexError or struct.error from inside the parser: 400
    random byte changes, deletions and insertions in the encodings above."""
    rng = np.random.default_rng(0)
    sources = [serialized for _, serialized in sorted(UNUSUAL_EXAMPLES.items())]
    parsed = refused = 0
    for _ in range(400):
        damaged = bytearray(sources[rng.integers(len(sources))])
        for _ in range(rng.integers(1, 4)):
            at, edit = int(rng.integers(len(damaged))), rng.random()
            if edit < 0.5:
                damaged[at] = int(rng.integers(256))
            elif edit < 0.75:
                del damaged[at]
            else:
                damaged.insert(at, int(rng.integers(256)))
        try:
            features = parse_example(bytes(damaged))
        except ExampleError:
            refused += 1
        else:
            parsed += 1
            assert all(
                isinstance(name, str) and feature.kind in ("bytes", "float", "int64", None)
                for name, feature in features.items()
            )
    assert refused > 300 and parsed > 10  # both ways exercised


@pytest.mark.parametrize(
    ("serialized", "message"),
    [
        (_field(1, 2, _entry("f", _field(2, 2, _field(1, 2, bytes(6))))), "a packed float list's length is not a"),
        (_field(1, 2, _entry("ints", _INTS + _field(4, 5, bytes(2)))), "a field runs past its feature"),
    ],
)
def test_damage_that_tensorflows_fast_parser_reads_past_is_refused_as_protobuf_would(
    serialized: bytes, message: str
) -> None:
    """Where TensorFlow's fast parser is lax (it reads one float from 6 bytes of packed floats, and skips
    a fixed32 that ends past its Feature), protobuf's own decoders refuse the message, and so does ours:
    bytes like these come from a damaged shard, whose transitions must not be guessed."""
    from google.protobuf.message import DecodeError

    tf.io.parse_example([serialized], {"ints": tf.io.VarLenFeature(tf.int64), "f": tf.io.VarLenFeature(tf.float32)})
    with pytest.raises(DecodeError):
        tf.train.Example.FromString(serialized)
    with pytest.raises(ExampleError, match=message):
        parse_example(serialized)


# --- conversion is exact ---------------------------------------------------------------------------


def test_converted_buffer_holds_exactly_the_source_transitions(mixed_shard: Path, tmp_path: Path) -> None:
    summary = convert_shard(mixed_shard, tmp_path / "out.hdf5")
    buffer = load_buffer(tmp_path / "out.hdf5")
    assert isinstance(buffer, FramePoolBuffer) and len(buffer) == summary.transitions == 70
    assert buffer_multiset(buffer) == reference_multiset(mixed_shard)
    assert summary.episodes == 3 and summary.terminals == 1 and summary.skipped == 0
    batch = buffer[np.arange(len(buffer))]
    assert batch.obs.shape == (70, 4, 84, 84) and batch.obs.dtype == np.uint8
    assert set(batch.episode_id.tolist()) == {2**64 - 3, 2**64 - 2, 2**64 - 1}  # extra keys kept
    # Shuffled records come back in episode order: inside a run, the next transition starts where this one ended.
    following = buffer.next(np.arange(len(buffer)))
    inside = ~batch.done
    assert np.array_equal(batch.obs[following[inside]], batch.obs_next[inside])
    assert np.array_equal(batch.episode_id[following[inside]], batch.episode_id[inside])
    # Each episode is one run: it ends at its terminal or, where the data stops, truncated (not terminal).
    assert int(batch.done.sum()) == 3 and int(batch.terminated.sum()) == 1 and int(batch.truncated.sum()) == 2


def test_a_shard_without_terminals_converts(tmp_path: Path) -> None:
    shard = write_fields(tmp_path / "shard", shuffled_records(episodes(2, [(12, False), (9, False)]), seed=1))
    summary = convert_shard(shard, tmp_path / "out.hdf5")
    buffer = load_buffer(tmp_path / "out.hdf5")
    assert summary.terminals == 0 and not buffer.terminated.any()
    assert buffer_multiset(buffer) == reference_multiset(shard)


def test_frames_are_stored_once(tmp_path: Path) -> None:
    """Consecutive transitions cost about one frame each; isolated ones at most 5 frames (o_tp1 is o_t shifted)."""
    eps = episodes(3, [(60, True)])
    consecutive = write_fields(tmp_path / "consecutive", shuffled_records(eps))
    summary = convert_shard(consecutive, tmp_path / "consecutive.hdf5")
    assert summary.frames == 60 + 1 + 1  # 61 screens and the black padding frame
    assert summary.bytes_per_transition < 7.5 * 1024
    loaded = load_buffer(tmp_path / "consecutive.hdf5")
    assert loaded.nbytes / len(loaded) == pytest.approx(summary.bytes_per_transition)  # what training holds

    cache: dict[bytes, bytes] = {}
    isolated = [transition_fields(eps[0], t, cache) for t in range(4, 60, 5)]  # no two share a stack
    summary = convert_shard(write_fields(tmp_path / "isolated", isolated), tmp_path / "isolated.hdf5")
    assert summary.frames == 5 * len(isolated)
    assert summary.bytes_per_transition <= 36 * 1024


def test_same_pixels_encoded_differently_are_one_frame(tmp_path: Path) -> None:
    eps = episodes(4, [(8, False)])
    fields = [transition_fields(eps[0], t) for t in range(8)]
    for record in fields[::2]:  # re-encode half of the stacks with another compression level
        record["o_t"] = [encode_png(decode_frame(p), level=9) for p in record["o_t"]]
    assert fields[0]["o_t"][-1] != transition_fields(eps[0], 0)["o_t"][-1]
    shard = write_fields(tmp_path / "shard", fields)
    summary = convert_shard(shard, tmp_path / "out.hdf5")
    assert summary.frames == 8 + 1 + 1
    assert buffer_multiset(load_buffer(tmp_path / "out.hdf5")) == reference_multiset(shard)


def test_a_record_whose_next_observation_is_not_shifted_is_stored_whole(tmp_path: Path) -> None:
    eps = episodes(5, [(6, False), (6, False)])
    odd = transition_fields(eps[0], 2)
    odd["o_tp1"] = transition_fields(eps[1], 4)["o_tp1"]  # unrelated frames
    shard = write_fields(tmp_path / "shard", [transition_fields(eps[0], t) for t in (0, 1)] + [odd])
    convert_shard(shard, tmp_path / "out.hdf5")
    assert buffer_multiset(load_buffer(tmp_path / "out.hdf5")) == reference_multiset(shard)


# --- damaged input -----------------------------------------------------------------------------------


def rewrite_decompressed(source: Path, target: Path, change) -> Path:
    raw = bytearray(gzip.decompress(source.read_bytes()))
    change(raw)
    target.write_bytes(gzip.compress(bytes(raw)))
    return target


def third_record_offset(raw: bytes) -> int:
    offset = 0
    for _ in range(2):
        (length,) = struct.unpack_from("<Q", raw, offset)
        offset += 12 + length + 4
    return offset


def small_shard(tmp_path: Path) -> Path:
    return write_fields(tmp_path / "good", shuffled_records(episodes(6, [(5, True), (4, False)]), seed=2))


def corrupt_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = small_shard(tmp_path)
    data = good.read_bytes()
    truncated = tmp_path / "truncated"
    truncated.write_bytes(data[: len(data) * 2 // 3])

    def flip_payload(raw: bytearray) -> None:
        raw[third_record_offset(raw) + 12 + 40] ^= 0xFF

    bad_crc = rewrite_decompressed(good, tmp_path / "bad_crc", flip_payload)
    fields = shuffled_records(episodes(6, [(5, True), (4, False)]), seed=2)
    no_action = [dict(f) for f in fields]
    del no_action[2]["a_t"]
    missing = write_fields(tmp_path / "missing_feature", no_action)
    small = [dict(f) for f in fields]
    small[2]["o_tp1"] = [*small[2]["o_tp1"][:3], encode_png(np.zeros((80, 80), dtype=np.uint8))]
    wrong_size = write_fields(tmp_path / "wrong_size", small)
    not_gzip = tmp_path / "not_gzip"
    not_gzip.write_bytes(gzip.decompress(data))  # an uncompressed TFRecord file
    return {
        "not_gzip": (not_gzip, "record 0: not gzip-compressed"),
        "truncated": (truncated, "truncated"),
        "crc": (bad_crc, "record 2: data checksum mismatch"),
        "missing": (missing, "record 2: missing feature 'a_t'"),
        "size": (wrong_size, "record 2: frame o_tp1[3] is 80x80 pixels, expected 84x84"),
    }


def test_each_kind_of_damage_names_the_shard_and_record(tmp_path: Path) -> None:
    for name, (shard, message) in corrupt_cases(tmp_path).items():
        output = tmp_path / f"{name}.hdf5"
        with pytest.raises(ShardError, match=re.escape(message)) as error:
            convert_shard(shard, output)
        assert str(shard) in str(error.value)
        assert not output.exists()
        assert not list(tmp_path.glob(f".{name}.hdf5.*")), "a temporary file was left behind"


def test_skip_corrupt_skips_bad_records_and_counts_them(tmp_path: Path) -> None:
    cases = corrupt_cases(tmp_path)
    for name in ("crc", "missing", "size"):
        summary = convert_shard(cases[name][0], tmp_path / f"{name}.hdf5", skip_corrupt=True)
        assert (summary.transitions, summary.skipped) == (8, 1), name
    summary = convert_shard(cases["truncated"][0], tmp_path / "truncated.hdf5", skip_corrupt=True)
    assert summary.skipped == 1 and 0 < summary.transitions < 9 and "truncated" in summary.note


def test_corrupt_shard_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    shard, message = corrupt_cases(tmp_path)["crc"]
    result = run_converter("--shard-file", str(shard), "--output", str(tmp_path / "out.hdf5"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {shard}: {message}" in result.stderr
    skipping = run_converter(
        "--shard-file", str(shard), "--output", str(tmp_path / "out.hdf5"), "--skip-corrupt", cwd=tmp_path
    )
    assert skipping.returncode == 0, skipping.stderr
    assert "1 corrupt records skipped" in skipping.stdout


# --- never a partial file; resumable ------------------------------------------------------------------


def test_an_interrupted_conversion_leaves_nothing_at_the_final_path(mixed_shard: Path, tmp_path: Path) -> None:
    output = tmp_path / "out" / "buffer.hdf5"

    def interrupt(_bytes: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_shard(mixed_shard, output, on_bytes_read=interrupt)
    assert not output.exists() and list(output.parent.iterdir()) == []


def run_converter(*args: str, cwd: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_in_process("converters/rl_unplugged_atari.py", *args, cwd=cwd, env_extra=env_extra)


def test_several_shards_in_parallel_then_rerun_skips_them(tmp_path: Path) -> None:
    shards = [
        write_fields(tmp_path / f"run_1-0000{i}-of-00100", shuffled_records(episodes(10 + i, [(7, True), (5, False)])))
        for i in range(3)
    ]
    out = tmp_path / "buffers"
    first = run_converter("--shard-file", *map(str, shards), "--output", str(out), "--workers", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "converted 3 shard(s): 36 transitions, 6 episodes seen, 3 terminals" in first.stdout
    for shard in shards:
        assert buffer_multiset(load_buffer(out / f"{shard.name}.hdf5")) == reference_multiset(shard)
    again = run_converter("--shard-file", *map(str, shards), "--output", str(out), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("already converted, skipped") == 3
    redo = run_converter("--shard-file", str(shards[0]), "--output", str(out), "--overwrite", cwd=tmp_path)
    assert redo.returncode == 0 and "converted 1 shard(s)" in redo.stdout


def test_a_preset_file_drives_the_converter_and_flags_override_it(tmp_path: Path) -> None:
    shard = small_shard(tmp_path)
    preset = tmp_path / "conversion.yaml"
    preset.write_text(f"shard_file: [{shard}]\noutput: {tmp_path / 'from-preset.hdf5'}\ncompression: lzf\n")
    result = run_converter("--config", str(preset), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert buffer_multiset(load_buffer(tmp_path / "from-preset.hdf5")) == reference_multiset(shard)
    again = run_converter("--config", str(preset), "--output", str(tmp_path / "from-flag.hdf5"), cwd=tmp_path)
    assert again.returncode == 0 and (tmp_path / "from-flag.hdf5").is_file(), again.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--task", "Pong", "--run-id", "6"], "--run-id 6: expected a value in [1, 5]"),
        (["--task", "Pong", "--shard-id", "100"], "--shard-id 100: expected a value in [0, 99]"),
        (["--task", "Pong", "--output", "x.hdf5"], "--output goes with --shard-file"),
        (["--shard-file", "a", "--workers", "0"], "--workers 0: expected at least 1"),
        (["--shard-file", "a", "--compression", "zstd"], "invalid choice: 'zstd'"),
        ([], "give either --task (with --run-id/--shard-id) or --shard-file"),
    ],
)
def test_converter_flag_mistakes_are_one_line_before_any_download(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    result = run_converter(*flags, "--dataset-dir", str(tmp_path / "datasets"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "datasets").exists()


def test_many_games_runs_and_shards_as_ray_tasks_then_rerun_skips_them(tmp_path: Path, ray_address: str) -> None:
    datasets, buffers = tmp_path / "datasets", tmp_path / "buffers"
    shards = []
    for g, game in enumerate(("Pong", "Breakout")):
        for run in (1, 2):
            path = datasets / game / f"run_{run}-00000-of-00100"
            path.parent.mkdir(parents=True, exist_ok=True)
            shards.append(write_fields(path, shuffled_records(episodes(20 + 2 * g + run, [(6, True), (4, False)]))))
    flags = ["--task", "PongNoFrameskip-v4", "Breakout", "--run-id", "1", "2", "--shard-id", "0"]
    flags += ["--dataset-dir", str(datasets), "--buffer-dir", str(buffers), "--ray-address", ray_address]
    # a Ray driver of its own, in a new interpreter
    first = run_repo_script("converters/rl_unplugged_atari.py", *flags, cwd=tmp_path, fresh=True)
    assert first.returncode == 0, first.stderr[-3000:]
    total = next(line for line in first.stdout.splitlines() if line.startswith("converted 4 shard(s)"))
    assert "40 transitions, 8 episodes seen, 4 terminals" in total and "shards/s" in total and "transitions/s" in total
    for shard in shards:  # each task wrote its own buffer, exactly the shard's transitions
        output = buffers / shard.parent.name / f"{shard.name}.hdf5"
        assert buffer_multiset(load_buffer(output)) == reference_multiset(shard)
    assert not list(buffers.rglob("*.part"))
    again = run_repo_script("converters/rl_unplugged_atari.py", *flags, cwd=tmp_path, fresh=True)
    assert again.returncode == 0 and again.stdout.count("already converted, skipped") == 4


def test_a_failing_shard_among_workers_leaves_no_partial_file(tmp_path: Path) -> None:
    good = small_shard(tmp_path)
    bad, _ = corrupt_cases(tmp_path)["missing"]
    out = tmp_path / "buffers"
    result = run_converter("--shard-file", str(good), str(bad), "--output", str(out), "--workers", "2", cwd=tmp_path)
    assert result.returncode == 2 and "missing feature 'a_t'" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["good.hdf5"]


def test_missing_shards_download_in_their_workers_and_the_bars_count_them(
    tmp_path: Path, http_server: tuple[str, Path]
) -> None:
    """Each worker fetches its own shard from the mirror, so one shard downloads while another converts:
    the download bar counts every shard's bytes, and the conversion bar's total grows by each."""
    root, served = http_server
    mirror = served / "Pong"
    mirror.mkdir()
    shards = [
        write_fields(mirror / f"run_1-0000{i}-of-00100", shuffled_records(episodes(30 + i, [(6, True), (4, False)])))
        for i in range(3)
    ]
    datasets, buffers = tmp_path / "datasets", tmp_path / "buffers"
    (datasets / "Pong").mkdir(parents=True)
    (datasets / "Pong" / shards[1].name).hardlink_to(shards[1])  # already on disk: converted, not fetched
    flags = ["--task", "Pong", "--shard-id", "0", "1", "2", "--workers", "2"]
    flags += ["--dataset-dir", str(datasets), "--buffer-dir", str(buffers)]
    result = run_converter(*flags, cwd=tmp_path, env_extra={"RL_UNPLUGGED_MIRROR": root})
    assert result.returncode == 0, result.stderr
    for shard in shards:
        assert (datasets / "Pong" / shard.name).read_bytes() == shard.read_bytes()
        assert buffer_multiset(load_buffer(buffers / "Pong" / f"{shard.name}.hdf5")) == reference_multiset(shard)
    fetched = tqdm.format_sizeof(shards[0].stat().st_size + shards[2].stat().st_size)
    read = tqdm.format_sizeof(sum(shard.stat().st_size for shard in shards))
    lines = result.stderr.splitlines()
    assert f" {fetched}/{fetched} " in [line for line in lines if line.startswith("download: ")][-1]
    assert f" {read}/{read} " in [line for line in lines if line.startswith("convert 3 shards: ")][-1]
    assert not list(datasets.rglob("*.part"))


def test_downloads_name_the_url_and_the_place_for_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror that cannot be reached is found before torch and Tianshou are imported: at once."""
    result = run_converter(
        "--task",
        "BreakoutNoFrameskip-v4",
        "--run-id",
        "2",
        "--shard-id",
        "3",
        "--dataset-dir",
        str(tmp_path / "datasets"),
        cwd=tmp_path,
        env_extra={"RL_UNPLUGGED_MIRROR": "http://127.0.0.1:9/rl_unplugged/atari"},
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "http://127.0.0.1:9/rl_unplugged/atari/Breakout/run_2-00003-of-00100" in line
    assert str(tmp_path / "datasets" / "Breakout" / "run_2-00003-of-00100") in line
    monkeypatch.setenv("RL_UNPLUGGED_MIRROR", "http://127.0.0.1:9/rl_unplugged/atari")
    flags = ["--task", "Breakout", "--dataset-dir", str(tmp_path / "datasets"), "--buffer-dir", str(tmp_path / "b")]
    assert modules_imported_by("converters/rl_unplugged_atari.py", flags, watched=("tianshou", "torch")) == []
    unknown = run_converter("--task", "Breakot", cwd=tmp_path)
    assert unknown.returncode == 2 and "not an RL Unplugged Atari game" in unknown.stderr


def test_game_names() -> None:
    from offline_rl.data.rl_unplugged.sources import game_name

    assert game_name("ALE/Breakout-v5") == game_name("breakout") == "Breakout"
    assert game_name("MsPacmanNoFrameskip-v4") == "MsPacman"
    with pytest.raises(OfflineRLError):
        game_name("CartPole-v1")


# --- it trains -----------------------------------------------------------------------------------------


def test_converted_shards_train_with_atari_cql(mixed_shard: Path, tmp_path: Path) -> None:
    buffer_path = tmp_path / "pong.hdf5"
    convert = run_converter("--shard-file", str(mixed_shard), "--output", str(buffer_path), cwd=tmp_path)
    assert convert.returncode == 0, convert.stderr
    second = tmp_path / "pong-2.hdf5"
    convert_shard(write_fields(tmp_path / "other", shuffled_records(episodes(8, [(9, True)]))), second)
    trained = run_in_process(
        "examples/atari_cql.py",
        "--task",
        "PongNoFrameskip-v4",
        "--load-buffer-name",
        str(buffer_path),
        str(second),
        "--buffer-from-rl-unplugged",
        "--n-step",
        "3",
        "--epoch",
        "1",
        "--update-per-epoch",
        "20",
        "--batch-size",
        "8",
        "--num-quantiles",
        "8",
        "--test-num",
        "1",
        "--logdir",
        str(tmp_path / "log"),
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert any(line.startswith("done:") and "20 updates" in line for line in trained.stdout.splitlines())
    assert "79 transitions" in trained.stdout  # 70 + 9: both shards were loaded


def test_several_shards_load_as_one_buffer_with_episodes_intact(tmp_path: Path) -> None:
    from offline_rl.data import load_buffers, save_buffer

    shards = [
        write_fields(tmp_path / f"s{i}", shuffled_records(episodes(20 + i, [(6, True), (5, False)]))) for i in range(2)
    ]
    outputs = [tmp_path / f"s{i}.hdf5" for i in range(2)]
    for shard, output in zip(shards, outputs, strict=True):
        convert_shard(shard, output)
    combined = load_buffers(outputs)
    assert isinstance(combined, FramePoolBuffer) and len(combined) == 22
    assert buffer_multiset(combined) == sorted(reference_multiset(shards[0]) + reference_multiset(shards[1]))
    batch = combined[np.arange(len(combined))]
    following = combined.next(np.arange(len(combined)))
    inside = ~batch.done
    assert np.array_equal(batch.obs[following[inside]], batch.obs_next[inside])
    assert int(batch.done.sum()) == 4 and combined.dataset_info["name"] == "s{0-1}"

    from tianshou.data import Batch, ReplayBuffer

    plain = ReplayBuffer(2)
    for _ in range(2):
        plain.add(
            Batch(obs=np.zeros(3), act=0, rew=0.0, terminated=False, truncated=False, obs_next=np.zeros(3), info={})
        )
    save_buffer(plain, tmp_path / "plain.hdf5")
    with pytest.raises(OfflineRLError, match="several buffers combine only when"):
        load_buffers([outputs[0], tmp_path / "plain.hdf5"])


def test_shards_in_a_game_folder_record_their_game_for_atari_cql(tmp_path: Path) -> None:
    """RL Unplugged lays shards out as `atari/<Game>/run_...`: a conversion keeps that game, and so
    does a buffer of several shards, so `atari_cql.py` without --task evaluates on it (Breakout's 4
    actions fit in Pong's 6: before, such a buffer was silently evaluated on the default Pong)."""
    from offline_rl.data import dataset_info, load_buffers

    outputs = []
    for i, folder in enumerate(["Breakout", "Breakout", "elsewhere"]):
        (tmp_path / folder).mkdir(exist_ok=True)
        shard = write_fields(tmp_path / folder / f"run_1-0000{i}-of-00100", shuffled_records(episodes(i, [(5, True)])))
        outputs.append(convert_shard(shard, tmp_path / f"s{i}.hdf5").output)
    assert dataset_info(load_buffer(outputs[0]))["task"] == "ALE/Breakout-v5"
    assert "task" not in dataset_info(load_buffer(outputs[2]))
    assert dataset_info(load_buffers(outputs[:2]))["task"] == "ALE/Breakout-v5"
    assert "task" not in dataset_info(load_buffers(outputs))  # the files disagree: none is claimed
    assert dataset_info(load_buffers(outputs))["frame_padding"] == "zero"  # Dopamine's replay, in every shard


def test_frame_pool_buffer_round_trip_and_task_check(tmp_path: Path) -> None:
    from offline_rl.data import save_buffer
    from offline_rl.data.fit import check_dataset_fits_env

    rng = np.random.default_rng(0)
    buffer = FramePoolBuffer(
        frames=rng.integers(0, 256, size=(7, 84, 84), dtype=np.uint8),
        obs_frames=np.array([[0, 1, 2, 3], [1, 2, 3, 4]]),
        obs_next_frames=np.array([[1, 2, 3, 4], [2, 3, 4, 6]]),
        act=np.array([1, 2]),
        rew=np.array([0.5, -1.0]),
        terminated=np.array([False, True]),
        truncated=np.array([False, False]),
        extra={"episode_id": np.array([9, 9], dtype=np.uint64)},
    )
    save_buffer(buffer, tmp_path / "pool.hdf5", compression="gzip")
    loaded = load_buffer(tmp_path / "pool.hdf5")
    assert isinstance(loaded, FramePoolBuffer)
    for key in ("obs", "obs_next", "act", "rew", "terminated", "episode_id"):
        assert np.array_equal(loaded[np.arange(2)][key], buffer[np.arange(2)][key]), key
    assert np.array_equal(loaded[1].obs_next[-1], buffer.frames[6])  # scalar indexing
    with pytest.raises(OfflineRLError, match=r"observations have shape \(4, 84, 84\), but --task Pendulum-v1"):
        check_dataset_fits_env(loaded, "Pendulum-v1", source="pool.hdf5")


def test_the_converter_never_imports_tensorflow(mixed_shard: Path, tmp_path: Path) -> None:
    """TensorFlow stays optional: with it made unimportable, conversion still works."""
    code = (
        "import sys; sys.modules['tensorflow'] = None; "  # any `import tensorflow` now raises ImportError
        "from offline_rl.cli.convert_rl_unplugged import main; "
        "sys.exit(main(['--shard-file', sys.argv[1], '--output', sys.argv[2]]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(mixed_shard), str(tmp_path / "out.hdf5")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=script_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert buffer_multiset(load_buffer(tmp_path / "out.hdf5")) == reference_multiset(mixed_shard)


# --- damage in the compressed stream itself ------------------------------------------------------


def complete_records(raw: bytes) -> int:
    """How many whole TFRecord frames an uncompressed prefix holds."""
    offset = count = 0
    while offset + 12 <= len(raw):
        (length,) = struct.unpack_from("<Q", raw, offset)
        if offset + 12 + length + 4 > len(raw):
            break
        offset += 12 + length + 4
        count += 1
    return count


@pytest.fixture(scope="module")
def long_shard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A shard of 160 records (several hundred KB compressed) and its uncompressed TFRecord bytes."""
    folder = tmp_path_factory.mktemp("long")
    shard = write_fields(
        folder / "run_1-00000-of-00100", shuffled_records(episodes(9, [(90, True), (70, False)]), seed=4)
    )
    return shard, gzip.decompress(shard.read_bytes())


def test_a_truncated_deflate_stream_keeps_every_record_before_the_cut(long_shard, tmp_path: Path) -> None:
    shard, _raw = long_shard
    data = shard.read_bytes()
    cut = tmp_path / "cut"
    cut.write_bytes(data[: len(data) * 6 // 10])
    decodable = complete_records(zlib.decompressobj(wbits=31).decompress(data[: len(data) * 6 // 10]))
    with pytest.raises(ShardError, match=r"the gzip stream ends early at compressed byte \d+ \(truncated file\)"):
        convert_shard(cut, tmp_path / "cut.hdf5")
    summary = convert_shard(cut, tmp_path / "cut.hdf5", skip_corrupt=True)
    assert summary.transitions == decodable > 50 and f"records 0-{decodable - 1} before it are intact" in summary.note


def test_a_broken_gzip_trailer_is_named_as_such_and_loses_no_record(long_shard, tmp_path: Path) -> None:
    shard, raw = long_shard
    data = bytearray(shard.read_bytes())
    data[-6] ^= 0xFF  # inside the trailer's CRC-32
    broken = tmp_path / "trailer"
    broken.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=r"the gzip trailer near compressed byte \d+ does not match the data") as error:
        convert_shard(broken, tmp_path / "trailer.hdf5")
    assert str(broken) in str(error.value) and "not gzip-compressed" not in str(error.value)
    summary = convert_shard(broken, tmp_path / "trailer.hdf5", skip_corrupt=True)
    assert summary.transitions == complete_records(raw) == 160


def test_a_damaged_second_gzip_member_keeps_the_whole_first_one(long_shard, tmp_path: Path) -> None:
    _shard, raw = long_shard
    half = len(raw) // 2
    first, second = gzip.compress(raw[:half]), bytearray(gzip.compress(raw[half:]))
    second[10:30] = b"\xff" * 20  # the start of its deflate data: an invalid block type
    damaged = tmp_path / "members"
    damaged.write_bytes(first + bytes(second))
    with pytest.raises(ShardError) as error:
        convert_shard(damaged, tmp_path / "members.hdf5")
    message = str(error.value)
    offset = int(re.search(r"damaged near compressed byte (\d+)", message).group(1))
    assert len(first) <= offset <= len(first) + 30 + 64  # where the damage is, to within one salvage step
    kept = complete_records(raw[:half])
    assert f"records 0-{kept - 1} before it are intact" in message
    assert convert_shard(damaged, tmp_path / "members.hdf5", skip_corrupt=True).transitions == kept


def test_damage_early_in_a_single_member_keeps_what_decodes_before_it(long_shard, tmp_path: Path) -> None:
    shard, _raw = long_shard
    data = bytearray(shard.read_bytes())
    spot = len(data) // 3
    data[spot : spot + 16] = b"\xff" * 16
    damaged = tmp_path / "early"
    damaged.write_bytes(bytes(data))
    prefix = zlib.decompressobj(wbits=31).decompress(bytes(data[: spot - 1024]))
    with pytest.raises(ShardError) as error:
        convert_shard(damaged, tmp_path / "early.hdf5")
    assert "not gzip-compressed" not in str(error.value) and str(damaged) in str(error.value)
    summary = convert_shard(damaged, tmp_path / "early.hdf5", skip_corrupt=True)
    assert summary.transitions >= complete_records(prefix) > 20
