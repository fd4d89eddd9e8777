"""Issue 13: memoryapp.core.rows makes the instances of its fixed statements' rows as
`Model.from_db` makes them, without going through the model's __init__ where that comes
to the same (Columns._from_db)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import signals

from memoryapp.core import rows
from memoryapp.core.models import Memory

MODELS = [m for m in apps.get_models() if m._meta.app_label in ("core", "dashboard")]


def state(instance) -> tuple:
    """What tells two instances apart: their class, their values (the deferred ones
    absent), and their state (its database, whether it is being added, its cache)."""
    values = {k: v for k, v in instance.__dict__.items() if k != "_state"}
    instance._state.fields_cache  # noqa: B018 (made when first read: from_db's setters read it)
    return type(instance), values, dict(instance._state.__dict__), instance.get_deferred_fields()


def some_values(fields) -> list:
    """A distinct value for each field (nothing checks them: no converters run here)."""
    return [f"{field.attname}-{i}" for i, field in enumerate(fields)]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_an_instance_is_what_from_db_makes(model):
    """Of every model: all its columns, and a subset (its id and its last column)."""
    assert MODELS
    concrete = model._meta.concrete_fields
    for names in (None, tuple(dict.fromkeys([model._meta.pk.name, concrete[-1].name]))):
        columns = rows.Columns(model, "x", names)
        values = some_values(columns.fields)
        made = columns._from_db()(connection.alias, list(values))
        expected = model.from_db(connection.alias, columns.attnames, list(values))
        assert state(made) == state(expected)
        assert made._state.adding is False and made._state.db == connection.alias


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_model_is_made_without_init(model):
    """The way around __init__ is taken for every model (a check that refused them would
    leave the equality above true and the speed lost)."""
    columns = rows.Columns(model, "x")
    assert columns._plain_attributes
    assert columns._from_db().__name__ == "build"


def test_a_model_with_its_own_init_or_from_db_gets_them(monkeypatch):
    """A model that overrides __init__ or from_db (to record what it loaded, say) is
    made by from_db, through them."""
    made = []

    def init(self, *args, **kwargs):
        made.append("init")
        super(Memory, self).__init__(*args, **kwargs)

    monkeypatch.setattr(Memory, "__init__", init)
    columns = rows.Columns(Memory, "x")
    columns._from_db()(connection.alias, some_values(columns.fields))
    assert made == ["init"]
    monkeypatch.undo()

    @classmethod
    def from_db(cls, db, field_names, values):
        made.append("from_db")
        return super(Memory, cls).from_db(db, field_names, values)

    monkeypatch.setattr(Memory, "from_db", from_db)
    columns = rows.Columns(Memory, "x")
    columns._from_db()(connection.alias, some_values(columns.fields))
    assert made == ["init", "from_db"]


@pytest.mark.parametrize("signal", ["pre_init", "post_init"])
def test_a_listener_of_post_init_or_pre_init_gets_its_instances(signal):
    """With a receiver of post_init (or pre_init) for the model, instances are made by
    from_db, which sends them."""
    seen = []

    def receiver(sender, **kwargs):
        seen.append(sender)

    getattr(signals, signal).connect(receiver, sender=Memory)
    try:
        columns = rows.Columns(Memory, "x")
        columns._from_db()(connection.alias, some_values(columns.fields))
    finally:
        getattr(signals, signal).disconnect(receiver, sender=Memory)
    assert seen == [Memory]


def test_an_attribute_with_a_setter_of_its_own_is_set_through_it(monkeypatch):
    """A field whose attribute on the class sets something else (a descriptor with a
    __set__ of its own): the instance is made by from_db, through that setter."""

    class Shouting:
        def __get__(self, instance, owner=None):
            return self if instance is None else instance.__dict__["content"]

        def __set__(self, instance, value):
            instance.__dict__["content"] = str(value).upper()

    monkeypatch.setattr(Memory, "content", Shouting())
    columns = rows.Columns(Memory, "x")
    assert not columns._plain_attributes
    values = some_values(columns.fields)
    made = columns._from_db()(connection.alias, list(values))
    assert made.content == "CONTENT-" + str(columns.attnames.index("content"))
    assert state(made) == state(Memory.from_db(connection.alias, columns.attnames, values))
