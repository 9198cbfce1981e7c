import pytest

from gpuwrite.host.verbs import Context


@pytest.fixture
def nic():
    """A context with its engine stopped: tests drive it with ctx.poll()."""
    with Context() as ctx:
        yield ctx
