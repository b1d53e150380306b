#!/usr/bin/env python3
"""random_schemas.py COUNT SEED: COUNT random JSON schemas (a JSON list) of the subset structured outputs follow
(gpu/grammar/json_schema.hpp): objects with properties, required and additionalProperties false; arrays with
items, minItems and maxItems; strings plain, enum, const or of the formats date, time, date-time and uuid; integer,
number, boolean, null; anyOf; type lists; and definitions in $defs reached through $ref, one of them recursive."""
import json
import random
import sys

NAMES = ["name", "age", "city", "tags", "score", "id", "when", "items", "kind", "ok", "note", "parent", "size"]


def leaf(rng):
    kind = rng.choice(["string", "integer", "number", "boolean", "null", "enum", "const", "date", "time", "date-time",
                       "uuid", "types"])
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 1, 2.5, True, None, "x y"], rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False, None, {"a": 1}, [1, "b"]])}
    if kind in ("date", "time", "date-time", "uuid"):
        return {"type": "string", "format": kind}
    if kind == "types":
        return {"type": rng.sample(["string", "integer", "boolean", "null"], 2)}
    return {"type": kind}


def schema(rng, depth):
    if depth <= 0 or rng.random() < 0.35:
        return leaf(rng)
    kind = rng.choice(["object", "object", "array", "anyOf"])
    if kind == "array":
        s = {"type": "array", "items": schema(rng, depth - 1)}
        if rng.random() < 0.5:
            s["minItems"] = rng.randint(0, 2)
        if rng.random() < 0.5:
            s["maxItems"] = s.get("minItems", 0) + rng.randint(0, 3)
        return s
    if kind == "anyOf":
        return {"anyOf": [schema(rng, depth - 1) for _ in range(rng.randint(2, 3))]}
    names = rng.sample(NAMES, rng.randint(1, 4))
    s = {"type": "object", "properties": {n: schema(rng, depth - 1) for n in names},
         "required": [n for n in names if rng.random() < 0.6], "additionalProperties": False}
    if rng.random() < 0.3:
        s["description"] = "an object"
    return s


def with_definitions(rng, body):
    """A schema whose body refers to a definition, and a recursive one (a node with optional children)."""
    node = {"type": "object", "properties": {"label": {"type": "string"},
                                             "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                          "maxItems": 2}},
            "required": ["label"], "additionalProperties": False}
    return {"type": "object", "properties": {"main": body, "tree": {"$ref": "#/$defs/node"},
                                             "extra": {"$ref": "#/$defs/extra"}},
            "required": ["main", "tree"], "additionalProperties": False,
            "$defs": {"node": node, "extra": schema(rng, 1)}}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: random_schemas.py COUNT SEED")
    rng = random.Random(int(sys.argv[2]))
    out = []
    for i in range(int(sys.argv[1])):
        body = schema(rng, rng.randint(1, 3))
        if body.get("type") != "object":
            body = {"type": "object", "properties": {"value": body}, "required": ["value"], "additionalProperties": False}
        out.append(with_definitions(rng, body) if i % 5 == 4 else body)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
