"""tessera.numpy's remaining jax.numpy names (tessera/_np_extra.py) against numpy on the same inputs: the dtype
aliases, r_ and c_, packbits and unpackbits, place and histogramdd (eagerly and, where they trace, under jit),
and the host-side helpers (from*, load, save, savez, array_repr, array_str, the print options). Where jax.numpy
differs from numpy (float32 for numpy's float64 results, place's inplace=False) the expected value says so."""
import io

import numpy as np
import pytest

import tessera
import tessera.numpy as tnp


def _same(got, want, rtol=1e-6):
    assert isinstance(got, tnp.Array), type(got)
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=1e-6)


# ---- dtype aliases ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,want", [("bool", np.bool_), ("double", np.float64), ("single", np.float32),
                                       ("float_", np.float64), ("int_", np.int64)])
def test_dtype_alias_is_numpys_dtype(name, want):
    alias = getattr(tnp, name)
    assert np.dtype(alias) == np.dtype(want)
    assert tnp.zeros(3, alias).dtype == np.dtype(want)


def test_bool_alias_keeps_builtin_bool_inside_the_package():
    # tnp.bool shadows the builtin only as an attribute: the package's own truth tests still work.
    assert tnp.bool is tnp.bool_
    assert bool(tnp.asarray(1.0)) is True
    assert tnp.asarray([True, False]).dtype == tnp.bool


def test_uint_is_left_out():
    # numpy's uint is uint64, which the engine has no dtype for.
    assert not hasattr(tnp, "uint")


# ---- r_ and c_ ----------------------------------------------------------------------------------------------


_R_CASES = [
    lambda m: m.r_[0:5],
    lambda m: m.r_[2:11:3],
    lambda m: m.r_[0.5:2.0:0.25],
    lambda m: m.r_[0:1:5j],
    lambda m: m.r_[-1:1:4j, 7, 8],
    lambda m: m.r_[[1, 2], 3, [4.5, 6]],
    lambda m: m.r_[np.ones((2, 2)), np.zeros((1, 2))],
    lambda m: m.r_["-1", np.ones((2, 2)), np.zeros((2, 1))],
    lambda m: m.r_["0,2", [1, 2], [3, 4]],
    lambda m: m.r_["0,2,0", [1, 2], [3, 4]],
    lambda m: m.r_["1,3,-2", [[1, 2]], [[3, 4]]],
    lambda m: m.r_["r", [1, 2], [3, 4]],
    lambda m: m.r_["c", [1, 2], [3, 4]],
    lambda m: m.c_[[1, 2, 3], [4, 5, 6]],
    lambda m: m.c_[np.ones((2, 3)), np.zeros((2, 2)), 0:2],
    lambda m: m.c_[np.arange(3), 0:1:3j],
    lambda m: m.c_["0", [1, 2], [3, 4]],
]


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # numpy's r_["r"] makes a np.matrix
@pytest.mark.parametrize("case", range(len(_R_CASES)))
def test_r_c_match_numpy(case):
    _same(_R_CASES[case](tnp), _R_CASES[case](np))


def test_r_integer_slices_are_int32_and_linspace_float32():
    assert tnp.r_[0:5].dtype == np.int32
    assert tnp.r_[0:1:5j].dtype == np.float32


def test_r_c_take_tessera_arrays_under_jit():
    a, b = np.arange(3, dtype=np.float32), np.arange(3, 6, dtype=np.float32)
    _same(tessera.jit(lambda x, y: tnp.r_[x, 0:2, y])(a, b), np.r_[a, 0:2, b])
    _same(tessera.jit(lambda x, y: tnp.c_[x, y] * 2)(a, b), np.c_[a, b] * 2)


def test_r_rejects_a_late_or_unknown_directive():
    with pytest.raises(ValueError, match="beginning"):
        tnp.r_[[1], "r"]
    with pytest.raises(ValueError, match="directive"):
        tnp.r_["x,y", [1]]


# ---- packbits and unpackbits --------------------------------------------------------------------------------


@pytest.fixture
def bits(rng):
    return rng.integers(0, 2, (3, 13)).astype(np.uint8)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("bitorder", ["big", "little"])
def test_packbits_matches_numpy(bits, axis, bitorder):
    got = tnp.packbits(bits, axis=axis, bitorder=bitorder)
    assert got.dtype == np.uint8
    _same(got, np.packbits(bits, axis=axis, bitorder=bitorder))


def test_packbits_of_bools_and_nonzero_integers(rng):
    b = rng.integers(0, 2, (4, 9)).astype(bool)
    _same(tnp.packbits(b, axis=1), np.packbits(b, axis=1))
    ints = rng.integers(-3, 4, (17,)).astype(np.int32)  # any nonzero value is a set bit
    _same(tnp.packbits(ints), np.packbits(ints != 0))


def test_packbits_rejects_floats():
    with pytest.raises(TypeError):
        tnp.packbits(np.ones(3, np.float32))


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("bitorder", ["big", "little"])
@pytest.mark.parametrize("count", [None, 0, 3, -2, 30])
def test_unpackbits_matches_numpy(rng, axis, bitorder, count):
    packed = rng.integers(0, 256, (3, 2)).astype(np.uint8)
    got = tnp.unpackbits(packed, axis=axis, count=count, bitorder=bitorder)
    assert got.dtype == np.uint8
    _same(got, np.unpackbits(packed, axis=axis, count=count, bitorder=bitorder))


def test_unpackbits_rejects_other_dtypes():
    with pytest.raises(TypeError):
        tnp.unpackbits(np.ones(3, np.int32))
    with pytest.raises(ValueError):
        tnp.unpackbits(np.ones(3, np.uint8), bitorder="middle")


def test_packbits_unpackbits_trace_under_jit(bits):
    packed = tessera.jit(lambda x: tnp.packbits(x, axis=1, bitorder="little"))(bits)
    _same(packed, np.packbits(bits, axis=1, bitorder="little"))
    back = tessera.jit(lambda p: tnp.unpackbits(p, axis=1, count=13, bitorder="little"))(np.asarray(packed))
    _same(back, bits)


# ---- place --------------------------------------------------------------------------------------------------


def _np_place(arr, mask, vals):
    out = np.array(arr, copy=True)
    np.place(out, mask, vals)
    return out


@pytest.mark.parametrize("vals", [[7.0], [7.0, 8.0, 9.0], np.arange(40, 60, dtype=np.float32)])
def test_place_matches_numpy(rng, vals):
    arr = rng.standard_normal((3, 5)).astype(np.float32)
    mask = rng.random((3, 5)) < 0.5
    _same(tnp.place(arr, mask, vals, inplace=False), _np_place(arr, mask, np.asarray(vals, np.float32)))


def test_place_casts_vals_to_arr_dtype_and_keeps_an_all_false_mask(rng):
    arr = np.arange(8, dtype=np.int32)
    mask = arr % 3 == 0
    got = tnp.place(arr, mask, [1.7, -2.2], inplace=False)
    assert got.dtype == np.int32
    _same(got, _np_place(arr, mask, [1.7, -2.2]))
    _same(tnp.place(arr, np.zeros(8, bool), [5], inplace=False), arr)


def test_place_under_jit_with_a_traced_mask(rng):
    arr = rng.standard_normal((4, 6)).astype(np.float32)
    mask = rng.random((4, 6)) < 0.4
    vals = np.array([1.0, 2.0, 3.0], np.float32)
    got = tessera.jit(lambda a, m, v: tnp.place(a, m, v, inplace=False))(arr, mask, vals)
    _same(got, _np_place(arr, mask, vals))


def test_place_needs_inplace_false_and_values():
    with pytest.raises(ValueError, match="inplace=False"):
        tnp.place(np.zeros(3), np.ones(3, bool), [1])
    with pytest.raises(ValueError, match="same size"):
        tnp.place(np.zeros(3), np.ones(4, bool), [1], inplace=False)
    with pytest.raises(ValueError, match="empty"):
        tnp.place(np.zeros(3), np.ones(3, bool), [], inplace=False)


# ---- histogramdd --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(bins=4),
    dict(bins=(2, 3, 5)),
    dict(bins=(3, [-1.0, 0.0, 0.5, 2.0], 4)),
    dict(bins=3, range=[(-1, 1), None, (0, 2)]),
    dict(bins=(2, 3, 4), density=True),
])
def test_histogramdd_matches_numpy(rng, kwargs):
    sample = rng.standard_normal((200, 3)).astype(np.float32)
    counts, edges = tnp.histogramdd(sample, **kwargs)
    want, want_edges = np.histogramdd(sample, **kwargs)
    _same(counts, want, rtol=1e-5)
    assert len(edges) == len(want_edges)
    for e, w in zip(edges, want_edges):
        _same(e, w, rtol=1e-6)


def test_histogramdd_weights_and_sequence_sample(rng):
    x, y = rng.standard_normal(50).astype(np.float32), rng.standard_normal(50).astype(np.float32)
    w = rng.random(50).astype(np.float32)
    counts, _ = tnp.histogramdd([x, y], bins=(3, 4), weights=w)
    want, _ = np.histogramdd([x, y], bins=(3, 4), weights=w)
    _same(counts, want, rtol=1e-5)
    counts, _ = tnp.histogramdd(x, bins=5)  # a 1-d sample is N points in one dim
    _same(counts, np.histogramdd(x, bins=5)[0])


def test_histogramdd_points_on_the_last_edge_and_outside():
    sample = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 0.5], [0.5, -1.0]], np.float32)
    kwargs = dict(bins=2, range=[(0, 1), (0, 1)])
    _same(tnp.histogramdd(sample, **kwargs)[0], np.histogramdd(sample, **kwargs)[0])


def test_histogramdd_under_jit_with_given_edges(rng):
    sample = rng.standard_normal((60, 2)).astype(np.float32)
    bins = ([-2.0, -0.5, 0.0, 3.0], [-1.0, 1.0])
    got = tessera.jit(lambda s: tnp.histogramdd(s, bins=bins)[0])(sample)
    _same(got, np.histogramdd(sample, bins=bins)[0])


def test_histogramdd_rejects_a_wrong_number_of_bins():
    with pytest.raises(ValueError):
        tnp.histogramdd(np.zeros((4, 2)), bins=(2, 3, 4))


# ---- host-side helpers --------------------------------------------------------------------------------------


def test_frombuffer_fromstring_fromiter_match_numpy():
    raw = np.arange(6, dtype=np.int32).tobytes()
    _same(tnp.frombuffer(raw, dtype=np.int32, count=4, offset=4),
          np.frombuffer(raw, dtype=np.int32, count=4, offset=4))
    got = tnp.fromstring("0.5, 1.5, 2.5", dtype=float, sep=",")
    assert got.dtype == np.float32  # numpy's float64, as asarray makes it (JAX without x64)
    _same(got, np.fromstring("0.5, 1.5, 2.5", dtype=float, sep=","))
    _same(tnp.fromiter((i * i for i in range(5)), dtype=np.int32), np.fromiter((i * i for i in range(5)), np.int32))


def test_fromfile_matches_numpy(tmp_path):
    path = tmp_path / "data.bin"
    np.arange(10, dtype=np.float32).tofile(path)
    _same(tnp.fromfile(path, dtype=np.float32, count=6, offset=8), np.fromfile(path, np.float32, 6, offset=8))


def test_save_and_load_round_trip_tessera_arrays(tmp_path):
    x = tnp.arange(12, dtype=tnp.float32).reshape(3, 4) * 0.5
    buf = io.BytesIO()
    tnp.save(buf, x)
    buf.seek(0)
    assert np.array_equal(np.load(buf), np.asarray(x))  # numpy reads what tnp.save wrote
    buf.seek(0)
    back = tnp.load(buf)
    _same(back, np.asarray(x))
    path = tmp_path / "arrays.npz"
    tnp.savez(path, a=x, b=tnp.asarray([1, 2, 3]))
    with tnp.load(path) as archive:
        assert np.array_equal(archive["a"], np.asarray(x))
        assert np.array_equal(archive["b"], [1, 2, 3])


def test_load_keeps_dtypes_the_engine_lacks(tmp_path):
    path = tmp_path / "strings.npy"
    np.save(path, np.array(["a", "bc"]))
    out = tnp.load(path)
    assert isinstance(out, np.ndarray) and list(out) == ["a", "bc"]


def test_array_repr_str_and_printoptions_are_numpys():
    x = tnp.asarray([1.0, 2.5, 3.0])
    assert tnp.array_str(x) == np.array_str(np.asarray(x))
    assert tnp.array_repr(x).endswith(np.array_repr(np.asarray(x))[len("array"):])
    with tnp.printoptions(precision=2):
        assert tnp.get_printoptions()["precision"] == 2
        assert np.get_printoptions()["precision"] == 2
    old = tnp.get_printoptions()["precision"]
    tnp.set_printoptions(precision=3)
    try:
        assert np.get_printoptions()["precision"] == 3
    finally:
        tnp.set_printoptions(precision=old)
