"""Errors a user can cause are Python exceptions naming the op, the shapes and the user's line; never an abort."""
import inspect

import pytest

import tessera
import tessera.numpy as tnp
from tessera import random


def here():
    return inspect.currentframe().f_back.f_lineno


def test_matmul_shape_error_names_op_shapes_and_line():
    a, b = tnp.zeros((2, 3)), tnp.zeros((4, 5))
    with pytest.raises(tessera.ShapeError) as e:
        line = here(); tnp.matmul(a, b)
    message = str(e.value)
    assert "matmul" in message and "[2,3]" in message and "[4,5]" in message
    assert f"test_errors.py:{line}" in message
    assert isinstance(e.value, ValueError) and isinstance(e.value, tessera.TesseraError)


def test_operator_and_broadcast_errors():
    with pytest.raises(tessera.ShapeError, match=r"\[3\].*\[4\]|\[4\].*\[3\]"):
        tnp.ones((3,)) + tnp.ones((4,))
    with pytest.raises(tessera.ShapeError, match="reshape"):
        tnp.reshape(tnp.ones((2, 3)), (4, 2))
    with pytest.raises(tessera.ShapeError):
        tnp.sum(tnp.ones((2, 3)), axis=5)
    with pytest.raises(tessera.ShapeError, match="concatenate"):
        tnp.concatenate([tnp.ones((2, 3)), tnp.ones((2, 4))], axis=0)


def test_errors_inside_jit_are_the_same_exceptions():
    f = tessera.jit(lambda x: x @ tnp.ones((5, 2)))
    with pytest.raises(tessera.ShapeError, match="matmul"):
        f(tnp.ones((2, 3)))
    g = tessera.jit(lambda d: d["missing"])
    with pytest.raises(KeyError):
        g({"present": tnp.ones(1)})
    assert f(tnp.ones((2, 5))).shape == (2, 2)  # the function still works after an error


def test_python_control_flow_on_tracers_is_a_concretization_error():
    f = tessera.jit(lambda x: x if x.sum() > 0 else -x)
    with pytest.raises(tessera.ConcretizationError, match="trac"):
        f(tnp.ones((3,)))
    with pytest.raises(tessera.ConcretizationError):
        tessera.jit(lambda x: float(x))(tnp.ones(()))


def test_bad_keys_and_dtypes():
    with pytest.raises(tessera.DTypeError, match="u32"):
        random.normal(tnp.zeros((3,)), (2,))
    with pytest.raises(TypeError):
        tnp.zeros((2,), dtype="complex64")


def test_python_exceptions_come_through_every_transform():
    from tessera import lax

    def bad(x, *rest):
        raise KeyError("from the user's function")

    x = tnp.ones((3,))
    for call in [lambda: tessera.grad(bad)(x), lambda: tessera.value_and_grad(bad)(x),
                 lambda: tessera.vmap(bad)(x), lambda: tessera.vjp(bad, x), lambda: tessera.trace(bad)(x),
                 lambda: lax.scan(lambda c, x: bad(x), x, tnp.ones((2, 3))),
                 lambda: lax.cond(True, bad, bad, x), lambda: tessera.jit(tessera.grad(bad))(x)]:
        with pytest.raises(KeyError, match="user's function"):
            call()


def test_shape_errors_inside_grad_name_the_users_line():
    with pytest.raises(tessera.ShapeError) as e:
        line = here(); tessera.grad(lambda x: tnp.sum(x @ tnp.ones((4,))))(tnp.ones((3,)))
    assert f"test_errors.py:{line}" in str(e.value) and "f32[3]" in str(e.value) and "f32[4]" in str(e.value)


def test_dtype_errors_are_type_errors():
    with pytest.raises(tessera.DTypeError, match="floating point"):
        tessera.grad(lambda x: tnp.sum(x))(tnp.ones(3, tnp.int32))
    with pytest.raises(TypeError, match="indices"):
        tnp.take(tnp.ones(3), tnp.ones(2))


def test_eager_binary_ops_name_the_users_line():
    # tnp.add and its kin are the engine's fastest entry points: their errors still say where they came from.
    a = tnp.ones((3,))
    with pytest.raises(tessera.ShapeError) as e:
        line = here(); tnp.add(a, tnp.ones((4,)))
    assert "add" in str(e.value) and f"test_errors.py:{line}" in str(e.value)
    with pytest.raises(tessera.DTypeError) as e:  # refused by the op's own rule, after promotion
        line = here(); tnp.bitwise_and(a, a)
    assert f"test_errors.py:{line}" in str(e.value)

    def inner():
        return tnp.multiply(a, tnp.ones((2,)))

    with pytest.raises(tessera.ShapeError, match=r"inner @ .*test_errors.py:"):
        inner()
    with pytest.raises(TypeError, match="2 arguments"):
        tnp.add(a)
    with pytest.raises(TypeError):
        tnp.add(a, None)


def test_shapes_whose_size_overflows_are_errors_not_wrapped_sizes():
    # 2^31 x 2^31 f32 is 2^64 bytes: a wrapped size would be 0 and the array's writes go past its buffer.
    for make in (lambda: tnp.ones((2 ** 31, 2 ** 31)), lambda: tnp.zeros((2 ** 32, 2 ** 32), tnp.int32),
                 lambda: tnp.broadcast_to(tnp.ones(()), (2 ** 40, 2 ** 40)),
                 lambda: tessera.jit(lambda x: tnp.broadcast_to(x, (2 ** 33, 2 ** 31)))(tnp.ones(()))):
        with pytest.raises(tessera.ShapeError, match=r"too large: its byte size overflows 64 bits"):
            make()
