"""A small, strict GraphQL engine for the RunPod emulator: parse, validate against a schema, execute.

It covers what RunPod clients send (one operation, fields, aliases, arguments, variables, input
objects, enums, lists) and rejects the rest the way graphql-js does: an unknown field, argument or input
field, a wrong type, a missing selection, an undefined variable. Fragments and directives are refused
as unsupported (no RunPod client we know sends them). Error texts follow graphql-js.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# ---- AST ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class EnumValue:
    name: str


@dataclass(frozen=True)
class TypeRef:
    name: str | None = None  # a named type, or None for a list
    of: TypeRef | None = None  # the item type of a list
    non_null: bool = False

    def __str__(self) -> str:
        inner = self.name if self.name is not None else f"[{self.of}]"
        return f"{inner}!" if self.non_null else str(inner)

    def nullable(self) -> TypeRef:
        return TypeRef(self.name, self.of, False)

    @property
    def named(self) -> str:
        return self.name if self.name is not None else self.of.named if self.of else "?"


@dataclass
class FieldNode:
    name: str
    alias: str | None
    args: dict[str, Any]
    selections: list[FieldNode] | None

    @property
    def key(self) -> str:
        return self.alias or self.name


@dataclass(frozen=True)
class VarDef:
    type: TypeRef
    default: Any = None
    has_default: bool = False


@dataclass
class Operation:
    kind: Literal["query", "mutation"]
    name: str | None
    variables: dict[str, VarDef]
    selections: list[FieldNode]


class RequestError(Exception):
    """The whole request is refused (syntax, validation, variables): HTTP 400 with every message."""

    def __init__(self, messages: list[str], code: str) -> None:
        super().__init__(messages[0])
        self.messages = messages
        self.code = code


class FieldError(Exception):
    """A resolver refused: `{"errors": [{"message": ...}]}`, like RunPod's "pod not found to terminate"."""


# ---- lexer and parser -----------------------------------------------------------------------------

TOKEN = re.compile(
    r"""
    (?P<skip>[\s,\ufeff]+|\#[^\n\r]*)
    |(?P<spread>\.\.\.)
    |(?P<block>\"\"\")
    |(?P<punct>[!$&():=@\[\]{}|])
    |(?P<name>[_A-Za-z][_0-9A-Za-z]*)
    |(?P<float>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+))
    |(?P<int>-?(?:0|[1-9][0-9]*))
    |(?P<string>"(?:[^"\\\n\r]|\\(?:["\\/bfnrt]|u[0-9A-Fa-f]{4}))*")
    """,
    re.VERBOSE,
)


def tokenize(source: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(source):
        match = TOKEN.match(source, pos)
        if match is None:
            raise RequestError([f"Syntax Error: Unexpected character: {source[pos]!r}."], "GRAPHQL_PARSE_FAILED")
        kind = match.lastgroup or "skip"
        if kind in ("spread", "block"):
            raise RequestError([f"Syntax Error: {match.group()!r} is not supported here."], "GRAPHQL_PARSE_FAILED")
        if kind != "skip":
            tokens.append((kind, match.group()))
        pos = match.end()
    tokens.append(("eof", "<EOF>"))
    return tokens


class Parser:
    def __init__(self, source: str) -> None:
        self.tokens = tokenize(source)
        self.i = 0

    def peek(self, value: str | None = None, kind: str | None = None) -> bool:
        tk, tv = self.tokens[self.i]
        if kind is not None and tk != kind:
            return False
        return value is None or (tv == value and tk in ("punct", "name"))

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        tk, tv = self.tokens[self.i]
        if (value is not None and (tv != value or tk not in ("punct", "name"))) or (kind is not None and tk != kind):
            expected = f'"{value}"' if value else (kind or "token").capitalize()
            found = "<EOF>" if tk == "eof" else f'"{tv}"' if tk == "punct" else tv
            raise RequestError([f"Syntax Error: Expected {expected}, found {found}."], "GRAPHQL_PARSE_FAILED")
        self.i += 1
        return tv

    def document(self) -> Operation:
        op = self.operation()
        if not self.peek(kind="eof"):
            raise RequestError(["This emulator accepts one operation per request."], "GRAPHQL_VALIDATION_FAILED")
        return op

    def operation(self) -> Operation:
        if self.peek("{"):
            return Operation("query", None, {}, self.selection_set())
        kind = self.take(kind="name")
        if kind not in ("query", "mutation"):
            raise RequestError([f'Syntax Error: Unexpected Name "{kind}".'], "GRAPHQL_PARSE_FAILED")
        name = self.take(kind="name") if self.peek(kind="name") else None
        variables = self.variable_definitions() if self.peek("(") else {}
        if self.peek("@"):
            raise RequestError(["Directives are not supported by this emulator."], "GRAPHQL_VALIDATION_FAILED")
        return Operation("query" if kind == "query" else "mutation", name, variables, self.selection_set())

    def variable_definitions(self) -> dict[str, VarDef]:
        self.take("(")
        defs: dict[str, VarDef] = {}
        while not self.peek(")"):
            self.take("$")
            name = self.take(kind="name")
            self.take(":")
            type_ref = self.type_ref()
            has_default = self.peek("=")
            default = None
            if has_default:
                self.take("=")
                default = self.value(const=True)
            if name in defs:
                raise RequestError([f'There can be only one variable named "${name}".'], "GRAPHQL_VALIDATION_FAILED")
            defs[name] = VarDef(type_ref, default, has_default)
        self.take(")")
        return defs

    def type_ref(self) -> TypeRef:
        if self.peek("["):
            self.take("[")
            inner = self.type_ref()
            self.take("]")
            ref = TypeRef(None, inner)
        else:
            ref = TypeRef(self.take(kind="name"))
        if self.peek("!"):
            self.take("!")
            ref = TypeRef(ref.name, ref.of, True)
        return ref

    def selection_set(self) -> list[FieldNode]:
        self.take("{")
        fields: list[FieldNode] = []
        while not self.peek("}"):
            fields.append(self.field())
        self.take("}")
        if not fields:
            raise RequestError(["Syntax Error: Expected Name, found }."], "GRAPHQL_PARSE_FAILED")
        return fields

    def field(self) -> FieldNode:
        name = self.take(kind="name")
        alias = None
        if self.peek(":"):
            self.take(":")
            alias, name = name, self.take(kind="name")
        args = self.arguments() if self.peek("(") else {}
        if self.peek("@"):
            raise RequestError(["Directives are not supported by this emulator."], "GRAPHQL_VALIDATION_FAILED")
        selections = self.selection_set() if self.peek("{") else None
        return FieldNode(name, alias, args, selections)

    def arguments(self) -> dict[str, Any]:
        self.take("(")
        args: dict[str, Any] = {}
        while not self.peek(")"):
            name = self.take(kind="name")
            self.take(":")
            if name in args:
                raise RequestError([f'There can be only one argument named "{name}".'], "GRAPHQL_VALIDATION_FAILED")
            args[name] = self.value(const=False)
        self.take(")")
        return args

    def value(self, const: bool) -> Any:
        kind, text = self.tokens[self.i]
        if text == "$" and kind == "punct" and not const:
            self.take("$")
            return Var(self.take(kind="name"))
        if text == "[" and kind == "punct":
            self.take("[")
            items = []
            while not self.peek("]"):
                items.append(self.value(const))
            self.take("]")
            return items
        if text == "{" and kind == "punct":
            return self.object_value(const)
        self.i += 1
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "string":
            return json.loads(text)
        if kind == "name":
            keywords: dict[str, Any] = {"true": True, "false": False, "null": None}
            return keywords[text] if text in keywords else EnumValue(text)
        raise RequestError([f"Syntax Error: Unexpected {text!r}."], "GRAPHQL_PARSE_FAILED")

    def object_value(self, const: bool) -> dict[str, Any]:
        self.take("{")
        fields: dict[str, Any] = {}
        while not self.peek("}"):
            name = self.take(kind="name")
            self.take(":")
            if name in fields:
                raise RequestError([f'There can be only one input field named "{name}".'], "GRAPHQL_VALIDATION_FAILED")
            fields[name] = self.value(const)
        self.take("}")
        return fields


def parse_type(text: str) -> TypeRef:
    parser = Parser(text)
    ref = parser.type_ref()
    parser.take(kind="eof")
    return ref


# ---- schema ---------------------------------------------------------------------------------------

BUILTIN_SCALARS = frozenset({"String", "Int", "Float", "Boolean", "ID"})


@dataclass(frozen=True)
class FieldDef:
    type: TypeRef
    args: Mapping[str, TypeRef] = field(default_factory=dict)


@dataclass
class Schema:
    objects: dict[str, dict[str, FieldDef]]
    inputs: dict[str, dict[str, TypeRef]]
    enums: dict[str, frozenset[str]]
    scalars: frozenset[str] = BUILTIN_SCALARS

    def is_input(self, name: str) -> bool:
        return name in self.inputs or name in self.enums or name in BUILTIN_SCALARS

    def is_leaf(self, name: str) -> bool:
        return name in self.scalars or name in self.enums


def fields(spec: Mapping[str, str | tuple[str, Mapping[str, str]]]) -> dict[str, FieldDef]:
    """{"pod": ("Pod", {"input": "PodFilter!"}), "id": "String"} -> FieldDefs."""
    out: dict[str, FieldDef] = {}
    for name, value in spec.items():
        if isinstance(value, tuple):
            out[name] = FieldDef(parse_type(value[0]), {k: parse_type(v) for k, v in value[1].items()})
        else:
            out[name] = FieldDef(parse_type(value))
    return out


def input_fields(spec: Mapping[str, str]) -> dict[str, TypeRef]:
    return {name: parse_type(t) for name, t in spec.items()}


# ---- validation -----------------------------------------------------------------------------------


def compatible(declared: TypeRef, expected: TypeRef) -> bool:
    """May a variable of type `declared` stand where `expected` is wanted (graphql-js "allowed position")?"""
    if expected.non_null:
        return declared.non_null and compatible(declared.nullable(), expected.nullable())
    if declared.non_null:
        return compatible(declared.nullable(), expected)
    if declared.of is not None or expected.of is not None:
        return declared.of is not None and expected.of is not None and compatible(declared.of, expected.of)
    return declared.name == expected.name


class Validator:
    def __init__(self, schema: Schema, op: Operation) -> None:
        self.schema = schema
        self.op = op
        self.errors: list[str] = []

    def run(self) -> None:
        for name, definition in self.op.variables.items():
            if not self.schema.is_input(definition.type.named):
                self.errors.append(f'Variable "${name}" cannot be non-input type "{definition.type}".')
        root = "Query" if self.op.kind == "query" else "Mutation"
        if root not in self.schema.objects:
            self.errors.append(f"Schema is not configured for {self.op.kind}s.")
            return
        self.selections(root, self.op.selections)

    def selections(self, type_name: str, nodes: list[FieldNode]) -> None:
        type_fields = self.schema.objects[type_name]
        for node in nodes:
            definition = type_fields.get(node.name)
            if definition is None:
                self.errors.append(f'Cannot query field "{node.name}" on type "{type_name}".')
                continue
            self.arguments(f"{type_name}.{node.name}", node, definition)
            target = definition.type.named
            if self.schema.is_leaf(target):
                if node.selections is not None:
                    self.errors.append(
                        f'Field "{node.name}" must not have a selection since type "{definition.type}" '
                        "has no subfields."
                    )
            elif node.selections is None:
                self.errors.append(
                    f'Field "{node.name}" of type "{definition.type}" must have a selection of subfields. '
                    f'Did you mean "{node.name} {{ ... }}"?'
                )
            else:
                self.selections(target, node.selections)

    def arguments(self, coordinate: str, node: FieldNode, definition: FieldDef) -> None:
        for name, value in node.args.items():
            expected = definition.args.get(name)
            if expected is None:
                self.errors.append(f'Unknown argument "{name}" on field "{coordinate}".')
            else:
                self.literal(value, expected)
        for name, expected in definition.args.items():
            if expected.non_null and name not in node.args:
                field_name = coordinate.split(".")[1]
                self.errors.append(
                    f'Field "{field_name}" argument "{name}" of type "{expected}" is required, but it was not provided.'
                )

    def literal(self, value: Any, expected: TypeRef) -> None:
        if isinstance(value, Var):
            self.variable_usage(value, expected)
            return
        if value is None:
            if expected.non_null:
                self.errors.append(f'Expected value of type "{expected}", found null.')
            return
        if expected.of is not None:
            for item in value if isinstance(value, list) else [value]:
                self.literal(item, expected.of)
            return
        if isinstance(value, list):
            self.errors.append(f'Expected value of type "{expected}", found a list.')
            return
        self.named_literal(value, expected.named, expected)

    def named_literal(self, value: Any, name: str, expected: TypeRef) -> None:
        if name in self.schema.inputs:
            self.input_object_literal(value, name)
        elif name in self.schema.enums:
            if not isinstance(value, EnumValue):
                self.errors.append(f'Enum "{name}" cannot represent non-enum value: {shown(value)}.')
            elif value.name not in self.schema.enums[name]:
                self.errors.append(f'Value "{value.name}" does not exist in "{name}" enum.')
        else:
            problem = scalar_problem(name, literal_as_json(value))
            if problem:
                self.errors.append(f'Expected value of type "{expected}", found {shown(value)}; {problem}')

    def input_object_literal(self, value: Any, name: str) -> None:
        if not isinstance(value, dict):
            self.errors.append(f'Expected value of type "{name}", found {shown(value)}.')
            return
        definition = self.schema.inputs[name]
        for key, item in value.items():
            if key not in definition:
                self.errors.append(f'Field "{key}" is not defined by type "{name}".')
            else:
                self.literal(item, definition[key])
        for key, ref in definition.items():
            if ref.non_null and key not in value:
                self.errors.append(f'Field "{name}.{key}" of required type "{ref}" was not provided.')

    def variable_usage(self, var: Var, expected: TypeRef) -> None:
        definition = self.op.variables.get(var.name)
        if definition is None:
            self.errors.append(f'Variable "${var.name}" is not defined.')
            return
        declared = definition.type
        if definition.has_default and definition.default is not None and not declared.non_null:
            declared = TypeRef(declared.name, declared.of, True)
        if not compatible(declared, expected):
            self.errors.append(
                f'Variable "${var.name}" of type "{definition.type}" used in position expecting type "{expected}".'
            )


def literal_as_json(value: Any) -> Any:
    return value.name if isinstance(value, EnumValue) else value


def shown(value: Any) -> str:
    if isinstance(value, EnumValue):
        return value.name
    return json.dumps(value)


def scalar_problem(name: str, value: Any) -> str | None:
    """graphql-js input coercion for the built-in scalars; None when the value is acceptable."""
    if name in ("String",) and not isinstance(value, str):
        return f"String cannot represent a non string value: {shown(value)}"
    if name == "ID" and not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
        return f"ID cannot represent value: {shown(value)}"
    if name == "Int":
        integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not integral:
            return f"Int cannot represent non-integer value: {shown(value)}"
        if not -(2**31) <= value < 2**31:
            return f"Int cannot represent non 32-bit signed integer value: {shown(value)}"
    if name == "Float" and (isinstance(value, bool) or not isinstance(value, int | float)):
        return f"Float cannot represent non numeric value: {shown(value)}"
    if name == "Boolean" and not isinstance(value, bool):
        return f"Boolean cannot represent a non boolean value: {shown(value)}"
    return None


# ---- variables ------------------------------------------------------------------------------------


def coerce_variables(schema: Schema, op: Operation, raw: Any) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RequestError(
            ["Variables must be provided as an Object where each property is a variable value."],
            "BAD_USER_INPUT",
        )
    values: dict[str, Any] = {}
    errors: list[str] = []
    for name, definition in op.variables.items():
        if name not in raw:
            if definition.has_default:
                values[name] = literal_as_json(definition.default)
            elif definition.type.non_null:
                errors.append(f'Variable "${name}" of required type "{definition.type}" was not provided.')
            continue
        problem = input_problem(schema, raw[name], definition.type, name)
        if problem:
            at, why = problem
            where = f' at "{at}"' if at != name else ""
            errors.append(f'Variable "${name}" got invalid value {json.dumps(raw[name])}{where}; {why}')
        else:
            values[name] = raw[name]
    if errors:
        raise RequestError(errors, "BAD_USER_INPUT")
    return values


def input_problem(schema: Schema, value: Any, ref: TypeRef, path: str) -> tuple[str, str] | None:
    """Why a JSON variable value does not fit `ref` (path, reason), or None."""
    if value is None:
        return (path, f'Expected non-nullable type "{ref}" not to be null.') if ref.non_null else None
    if ref.of is not None:
        items = value if isinstance(value, list) else [value]  # a single value is coerced to a list
        for index, item in enumerate(items):
            problem = input_problem(schema, item, ref.of, f"{path}[{index}]")
            if problem:
                return problem
        return None
    name = ref.named
    if name in schema.inputs:
        return input_object_problem(schema, value, name, path)
    if name in schema.enums:
        if not isinstance(value, str) or value not in schema.enums[name]:
            return path, f'Value {json.dumps(value)} does not exist in "{name}" enum.'
        return None
    reason = scalar_problem(name, value)
    return (path, reason) if reason else None


def input_object_problem(schema: Schema, value: Any, name: str, path: str) -> tuple[str, str] | None:
    if not isinstance(value, dict):
        return path, f'Expected type "{name}" to be an object.'
    definition = schema.inputs[name]
    for key in value:
        if key not in definition:
            return path, f'Field "{key}" is not defined by type "{name}".'
    for key, ref in definition.items():
        if ref.non_null and key not in value:
            return path, f'Field "{key}" of required type "{ref}" was not provided.'
        if key in value:
            problem = input_problem(schema, value[key], ref, f"{path}.{key}")
            if problem:
                return problem
    return None


def resolve_args(args: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
    return {name: resolve_value(value, variables) for name, value in args.items()}


def resolve_value(value: Any, variables: Mapping[str, Any]) -> Any:
    if isinstance(value, Var):
        return variables.get(value.name)
    if isinstance(value, EnumValue):
        return value.name
    if isinstance(value, list):
        return [resolve_value(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: resolve_value(v, variables) for k, v in value.items()}
    return value


# ---- execution ------------------------------------------------------------------------------------

Resolver = Callable[[dict[str, Any]], Any]


def complete(schema: Schema, value: Any, ref: TypeRef, node: FieldNode, variables: Mapping[str, Any]) -> Any:
    if callable(value):
        value = value(resolve_args(node.args, variables))
    if value is None:
        return None
    if ref.of is not None:
        return [complete(schema, item, ref.of, node, variables) for item in value]
    if schema.is_leaf(ref.named) or node.selections is None:
        return value
    return select(schema, value, ref.named, node.selections, variables)


def select(
    schema: Schema,
    obj: Mapping[str, Any],
    type_name: str,
    nodes: list[FieldNode],
    variables: Mapping[str, Any],
) -> dict[str, Any]:
    type_fields = schema.objects[type_name]
    return {
        node.key: complete(schema, obj.get(node.name), type_fields[node.name].type, node, variables) for node in nodes
    }


@dataclass
class Result:
    status: int
    body: dict[str, Any]


def execute(schema: Schema, body: Any, root: Mapping[str, Resolver]) -> Result:
    """Run one request body `{"query", "variables", "operationName"}` against resolvers of the root type."""
    try:
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            raise RequestError(["GraphQL operations must contain a non-empty `query`."], "BAD_REQUEST")
        op = Parser(body["query"]).document()
        validator = Validator(schema, op)
        validator.run()
        if validator.errors:
            raise RequestError(validator.errors, "GRAPHQL_VALIDATION_FAILED")
        variables = coerce_variables(schema, op, body.get("variables"))
    except RequestError as exc:
        return Result(400, {"errors": [{"message": m, "extensions": {"code": exc.code}} for m in exc.messages]})
    root_type = "Query" if op.kind == "query" else "Mutation"
    data: dict[str, Any] = {}
    for node in op.selections:
        try:
            value = root[node.name](resolve_args(node.args, variables))
            data[node.key] = complete(schema, value, schema.objects[root_type][node.name].type, node, variables)
        except FieldError as exc:
            return Result(200, {"errors": [{"message": str(exc)}]})
    return Result(200, {"data": data})
