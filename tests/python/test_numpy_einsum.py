"""tessera.numpy.einsum (tessera/_np_einsum.py) against np.einsum: implicit outputs, '...', diagonals and traces,
three or more operands (and the order they are contracted in), numpy's interleaved form, dtypes, errors,
gradients against finite differences, jit and vmap; einsum_path (tessera/_np_einsum_path.py) against
np.einsum_path's paths and reports. Where jax.numpy differs from numpy (ellipsis dims that the
output leaves out are summed) the expected value says so."""
import numpy as np
import pytest

import tessera
import tessera.numpy as tnp
from finite_differences import finite_difference
from comparisons import same

_R = np.random.default_rng(5)
_A = _R.standard_normal((3, 4)).astype(np.float32)
_B = _R.standard_normal((4, 5)).astype(np.float32)
_C = _R.standard_normal((5, 2)).astype(np.float32)
_S = _R.standard_normal((4, 4)).astype(np.float32)
_T = _R.standard_normal((2, 3, 3)).astype(np.float32)
_E1 = _R.standard_normal((2, 3, 4)).astype(np.float32)
_E3 = _R.standard_normal((7, 1, 4, 5)).astype(np.float32)
_V = _R.standard_normal((3, 5, 2)).astype(np.float32)


@pytest.mark.parametrize("spec,operands", [
    ("ij,jk->ik", (_A, _B)), ("ij,jk", (_A, _B)), ("ji,kj", (_B, _A)), ("ij->ji", (_A,)), ("ba", (_A,)),
    ("ij->", (_A,)), ("ij->i", (_A,)), ("ij", (_A,)),
    ("ii", (_S,)), ("ii->i", (_S,)), ("bii->b", (_T,)), ("bii->bi", (_T,)), ("ii,ij->j", (_S, _B)),
    ("ii,ij->ij", (_S, _B)),
    ("ij,jk,kl->il", (_A, _B, _C)), ("ij,jk,kl", (_A, _B, _C)), ("i,i,i->", (_A[0], _A[1], _A[2])),
    ("i,j,k->ijk", (_A[0], _B[0], _C[0])), ("ij,ij,ij->ij", (_A, _A, _A)),
    ("...ij,...jk->...ik", (_E3, np.swapaxes(_E3, -1, -2)[0])), ("...ij,...jk", (_E3, _V)),
    ("i...j,j...->i...", (_E1, _R.standard_normal((4, 3)).astype(np.float32))), ("...ii->...i", (_T,)),
    ("...", (_E1,)), (",ij->ij", (np.float32(2), _A)),
])
def test_einsum_matches_numpy(spec, operands):
    same(tnp.einsum(spec, *operands), np.einsum(spec, *operands), dtype=np.float32)


def test_einsum_order_and_many_operands():
    shapes = [(2, 30), (30, 3), (3, 40), (40, 2), (2, 5)]
    ops = [_R.standard_normal(s).astype(np.float32) for s in shapes]
    same(tnp.einsum("ab,bc,cd,de,ef->af", *ops), np.einsum("ab,bc,cd,de,ef->af", *ops), rtol=1e-4)
    # (j, k) first is the cheaper order (4x5x2 + 3x4x2 against 3x4x5 + 3x5x2 multiplications); the two
    # products show in the trace in that order.
    text = tessera.trace(lambda a, b, c: tnp.einsum("ij,jk,kl", a, b, c))(_A, _B, _C)
    assert text.count("dot_general(") == 2
    assert "f32[4,2]" in text.split("dot_general(")[1]
    # Two operands stay one dot_general, with no transposes around it.
    text = tessera.trace(lambda a, b: tnp.einsum("bqhd,bkhd->bhqk", a, b))(_R.standard_normal((2, 5, 3, 4)),
                                                                            _R.standard_normal((2, 6, 3, 4)))
    assert "// 1 dot_general, 1 nodes" in text


def test_einsum_jax_broadcasting_and_interleaved_form():
    # Ellipsis dims the output leaves out are summed (jax.numpy; numpy raises).
    same(tnp.einsum("...i->i", _E1), _E1.sum((0, 1)))
    same(tnp.einsum("ij...->", _E1), _E1.sum())
    # A size-1 dim broadcasts against its label's size elsewhere.
    same(tnp.einsum("ij,jk->ik", _A[:, :1], _B), np.einsum("ij,jk->ik", np.repeat(_A[:, :1], 4, 1), _B))
    same(tnp.einsum(_A, [0, 1], _B, [1, 2], [0, 2]), _A @ _B)
    same(tnp.einsum(_A, [0, 1], _B, [1, 2]), _A @ _B)
    same(tnp.einsum(_E1, [Ellipsis, 1], _B, [1, 2], [Ellipsis, 2]), _E1 @ _B)
    # A repeated label of sizes 3 and 1: the size-1 axis broadcasts first, so the diagonal is x[a, 0] (JAX's).
    x = _R.standard_normal((3, 1)).astype(np.float32)
    same(tnp.einsum("aa,ab->b", x, _A[:, :2]), (x * _A[:, :2]).sum(0))


def test_einsum_dtypes():
    ia = np.arange(12, dtype=np.int32).reshape(3, 4) - 6
    ib = np.arange(4, dtype=np.int32) - 1
    same(tnp.einsum("ij,j->i", ia, ib), ia @ ib, dtype=np.int32)
    same(tnp.einsum("ij,j->i", _A, ib), _A @ ib, dtype=np.float32)
    same(tnp.einsum("ij,j->i", ia, ib, preferred_element_type=np.float32), ia @ ib, dtype=np.float32)
    same(tnp.einsum("ij,j->i", ia > 0, ib > 0), np.einsum("ij,j->i", ia > 0, ib > 0), dtype=np.bool_)
    same(tnp.einsum("ij->", ia > 0), True, dtype=np.bool_)


@pytest.mark.parametrize("spec,operands,match", [
    ("ij,jk->ik", (_A, _C), "Size of label 'j'"), ("ijk", (_A,), "correct number of indices"),
    ("ij,jk->ik", (_A,), "2 subscript terms"), ("ij->k", (_A,), "appears in no input"),
    ("ij->ii", (_A,), "repeats"), ("i..j", (_A,), "invalid subscripts"),
])
def test_einsum_errors(spec, operands, match):
    with pytest.raises(ValueError, match=match):
        tnp.einsum(spec, *operands)


def test_einsum_gradients_jit_and_vmap():
    a, b, c = _A[:2, :3], _B[:3, :2], _C[:2]
    grads = tessera.grad(lambda x, y, z: (tnp.einsum("ij,jk,kl->il", x, y, z) ** 2).sum(), argnums=(0, 1, 2))(a, b, c)
    f = lambda x, y, z: (np.einsum("ij,jk,kl->il", x, y, z) ** 2).sum()
    d = lambda v: v.astype(np.float64)
    same(grads[0], finite_difference(lambda x: f(x, d(b), d(c)), a), rtol=1e-4)
    same(grads[1], finite_difference(lambda y: f(d(a), y, d(c)), b), rtol=1e-4)
    same(grads[2], finite_difference(lambda z: f(d(a), d(b), z), c), rtol=1e-4)
    s = _S[:3, :3]
    g = tessera.grad(lambda x: (tnp.einsum("ii,ij->j", x, b) ** 2).sum())(s)
    same(g, finite_difference(lambda x: (np.einsum("ii,ij->j", x, d(b)) ** 2).sum(), s), rtol=1e-4)
    same(tessera.jit(lambda x, y: tnp.einsum("...ij,...jk", x, y))(_E3, _V), np.einsum("...ij,...jk", _E3, _V))
    same(tessera.vmap(lambda x: tnp.einsum("j,jk,kl->l", x, _B, _C))(_A), np.einsum("ij,jk,kl->il", _A, _B, _C))


_PATH_CASES = [
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("ij,jk,kl,lm->im", [(5, 24), (24, 28), (28, 8), (8, 10)]),
    ("ab,bc,cd,de,ef->af", [(2, 30), (30, 3), (3, 40), (40, 2), (2, 5)]),
    ("ea,fb,abcd,gc,hd->efgh", [(6, 6), (6, 6), (6, 6, 6, 6), (6, 6), (6, 6)]),
    ("bdik,acaj,ikab,ajac,ikbd", [(2, 3, 4, 5), (6, 7, 6, 8), (4, 5, 6, 2), (6, 8, 6, 7), (4, 5, 2, 3)]),
    ("i,j,k->ijk", [(3,), (4,), (5,)]),
    ("ii,ij,jk", [(4, 4), (4, 6), (6, 2)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
]


@pytest.mark.parametrize("spec,shapes", _PATH_CASES)
@pytest.mark.parametrize("optimize", ["greedy", "optimal", False, True, ("optimal", 10 ** 6), ("greedy", 50)])
def test_einsum_path_matches_numpy(spec, shapes, optimize):
    ops = [_R.standard_normal(s) for s in shapes]
    path, text = tnp.einsum_path(spec, *ops, optimize=optimize)
    want_path, want_text = np.einsum_path(spec, *ops, optimize=optimize)
    assert path == want_path
    assert text == want_text


@pytest.mark.parametrize("spec,shapes", _PATH_CASES)
def test_einsum_follows_each_path(spec, shapes):
    ops = [_R.standard_normal(s) for s in shapes]
    want = np.einsum(spec, *ops)
    for optimize in ["auto", "optimal", "greedy", False, np.einsum_path(spec, *ops, optimize="optimal")[0],
                     tnp.einsum_path(spec, *ops, optimize="greedy")[0]]:
        got = tnp.einsum(spec, *[tnp.asarray(o, o.dtype) for o in ops], optimize=optimize)
        same(got, want, rtol=1e-9)


def test_einsum_path_with_ellipsis_and_interleaved_form():
    ops = [_R.standard_normal(s) for s in [(2, 3, 4), (4, 5), (5,)]]
    assert tnp.einsum_path("...ij,jk,k", *ops)[0] == np.einsum_path("...ij,jk,k", *ops)[0]
    a, b, c = (_R.standard_normal(s) for s in [(3, 4), (4, 5), (5, 2)])
    got = tnp.einsum_path(a, [0, 1], b, [1, 2], c, [2, 3], [0, 3], optimize="optimal")
    assert got == np.einsum_path(a, [0, 1], b, [1, 2], c, [2, 3], [0, 3], optimize="optimal")


def test_einsum_default_order_is_the_optimal_one():
    # Chain [5, 24] [24, 28] [28, 8] [8, 10]: the optimal order multiplies the first pair first ([5, 28]);
    # numpy's greedy one the middle pair ([24, 8]), which removes more elements but costs more in all.
    ops = [_R.standard_normal(s).astype(np.float32) for s in [(5, 24), (24, 28), (28, 8), (8, 10)]]
    first_product = lambda text: text.split("dot_general(")[1].split("\n")[0]
    text = tessera.trace(lambda *o: tnp.einsum("ij,jk,kl,lm->im", *o))(*ops)
    assert "f32[5,28]" in first_product(text) and text.count("dot_general(") == 3
    assert "transpose" not in text
    text = tessera.trace(lambda *o: tnp.einsum("ij,jk,kl,lm->im", *o, optimize="greedy"))(*ops)
    assert "f32[24,8]" in first_product(text)


def test_einsum_path_errors():
    with pytest.raises(ValueError, match="optimize must be one of"):
        tnp.einsum("ij,jk,kl", _A, _B, _C, optimize="fastest")
    with pytest.raises(ValueError, match="leaves 2 operands"):
        tnp.einsum("ij,jk,kl", _A, _B, _C, optimize=["einsum_path", (0, 1)])
    with pytest.raises(ValueError, match="distinct operands"):
        tnp.einsum("ij,jk,kl", _A, _B, _C, optimize=["einsum_path", (0, 3), (0, 1)])
    with pytest.raises(RuntimeError, match="1 more operands"):
        tnp.einsum_path("ij,jk,kl", _A, _B, _C, optimize=["einsum_path", (0, 1)])
