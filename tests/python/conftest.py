import numpy as np
import pytest

import tessera

# The sharding tests use a 4x2 mesh: 8 virtual CPU devices, asked for before anything uses the devices.
tessera.sharding.set_cpu_devices(8)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
