"""The OpenAPI document: strict request schemas (a struct that refuses unknown fields says so with
``additionalProperties: false``), for the document committed to ``openapi/openapi.json``
(``service.app.factory.openapi_document``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.openapi.spec import Schema as SchemaSpec
from litestar.typing import FieldDefinition

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator
    from litestar.openapi.spec import Schema

__all__ = ["StrictStructSchemaPlugin"]


# msgspec constraint -> OpenAPI keyword, for numbers, strings and arrays
_NUMERIC = {"gt": "exclusive_minimum", "ge": "minimum", "lt": "exclusive_maximum", "le": "maximum"}
_SIZED = {"str": ("min_length", "max_length"), "list": ("min_items", "max_items")}


# documented-only constraints (``Meta(extra_json_schema=...)``: the service checks them itself, with a 422) -> Schema
_EXTRA = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minItems": "min_items",
    "maxItems": "max_items",
    "enum": "enum",
}


def _constraints(field_type: Any) -> dict[str, Any]:
    """The constraints on a field (the non-null branch of an optional one), as Schema attributes: those msgspec
    enforces (a 400) and those only documented in ``extra_json_schema`` (the service's own 422)."""
    if isinstance(field_type, msgspec.inspect.UnionType):
        branches = [t for t in field_type.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(branches) != 1:
            return {}
        field_type = branches[0]
    out: dict[str, Any] = {}
    if isinstance(field_type, msgspec.inspect.Metadata):
        for key, value in (field_type.extra_json_schema or {}).items():
            if key in _EXTRA:
                out[_EXTRA[key]] = value
        field_type = field_type.type
    for name, keyword in _NUMERIC.items():
        value = getattr(field_type, name, None)
        if value is not None and isinstance(field_type, msgspec.inspect.FloatType | msgspec.inspect.IntType):
            out[keyword] = value
    kind = (
        "str"
        if isinstance(field_type, msgspec.inspect.StrType)
        else "list"
        if isinstance(field_type, msgspec.inspect.ListType)
        else None
    )
    if kind is not None:
        lo, hi = _SIZED[kind]
        if field_type.min_length is not None:
            out[lo] = field_type.min_length
        if field_type.max_length is not None:
            out[hi] = field_type.max_length
    if isinstance(field_type, msgspec.inspect.StrType) and field_type.pattern is not None:
        out["pattern"] = field_type.pattern
    if isinstance(field_type, msgspec.inspect.ListType) and isinstance(field_type.item_type, msgspec.inspect.Metadata):
        out["items"] = _constraints(field_type.item_type)
    return out


class StrictStructSchemaPlugin(StructSchemaPlugin):
    """Litestar's msgspec schema, plus ``additionalProperties: false`` for structs with ``forbid_unknown_fields``:
    the document then says what the API enforces (an unknown field is a 400), so clients and fuzzers know. Every
    field's msgspec constraints are written out again from msgspec's own description: Litestar drops a zero bound
    of an optional field (``gt=0`` on ``float | None``)."""

    def is_plugin_supported_field(self, field_definition: FieldDefinition) -> bool:
        if not super().is_plugin_supported_field(field_definition):
            return False
        info: Any = msgspec.inspect.type_info(field_definition.type_)
        return bool(getattr(info, "forbid_unknown_fields", False))

    def to_openapi_schema(self, field_definition: FieldDefinition, schema_creator: SchemaCreator) -> Schema:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        schema.additional_properties = False
        info: Any = msgspec.inspect.type_info(field_definition.type_)
        for field in info.fields:
            prop = (schema.properties or {}).get(field.encode_name)
            if not isinstance(prop, SchemaSpec):
                continue  # a $ref to another component carries its own constraints
            for keyword, value in _constraints(field.type).items():
                if keyword == "items":  # constraints of a list's items go on its items schema
                    branches = [prop, *(b for b in prop.one_of or [] if isinstance(b, SchemaSpec))]
                    target = next((b.items for b in branches if isinstance(b.items, SchemaSpec)), None)
                    for item_keyword, item_value in value.items():
                        if target is not None:
                            setattr(target, item_keyword, item_value)
                    continue
                setattr(prop, keyword, value)
        return schema
