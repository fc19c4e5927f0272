"""The top-level Python API: every advertised name resolves to a real object."""

import pytest

import ptmkit


@pytest.mark.parametrize("name", [n for n in ptmkit.__all__ if n != "__version__"])
def test_public_names_resolve(name):
    obj = getattr(ptmkit, name)
    assert callable(obj), name
    assert name in dir(ptmkit)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute"):
        ptmkit.not_a_thing  # noqa: B018
