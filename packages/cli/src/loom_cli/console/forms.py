"""The start form, generated from a workflow's input JSON Schema (pydantic's ``model_json_schema``).

Each property gets the input its type calls for: text (with minLength, maxLength, and the pattern as far as
a browser can check it, see ``patterns.py``), number (with
its bounds; integers step 1), checkbox, a select for an enum, and JSON in a textarea for lists, objects
and unions; ``$ref`` into ``$defs`` is followed. ``console.js`` turns the fields back into typed JSON,
leaves empty optional fields out (the model's defaults apply), and the API's ``invalid_input`` lists what
it refused.
"""

from __future__ import annotations

import json
from typing import Any

from ..sdk.models import Workflow
from ._html import esc
from .pages import page
from .patterns import html_pattern


def _resolve(schema: dict, root: dict) -> dict:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def field_kind(prop: dict, root: dict) -> tuple[str, bool]:
    """The input a property gets (string, integer, number, boolean, enum, json) and whether null is allowed."""
    prop = _resolve(prop, root)
    if "enum" in prop:
        return "enum", False
    options = [_resolve(p, root) for p in prop.get("anyOf", prop.get("oneOf", []))]
    nullable = any(o.get("type") == "null" for o in options)
    kinds = [o.get("type") for o in options if o.get("type") != "null"] or [prop.get("type")]
    kind = kinds[0] if len(kinds) == 1 else None
    return (kind if kind in ("string", "integer", "number", "boolean") else "json"), nullable


def _example(prop: dict, root: dict, depth: int = 0) -> Any:
    prop = _resolve(prop, root)
    if "default" in prop:
        return prop["default"]
    kind = prop.get("type")
    if kind == "array":
        return [_example(prop.get("items", {}), root, depth + 1)] if depth < 3 else []
    if kind == "object" or "properties" in prop:
        return {k: _example(v, root, depth + 1) for k, v in (prop.get("properties") or {}).items()} if depth < 3 else {}
    return {"string": "", "integer": 0, "number": 0, "boolean": False}.get(kind)


def start_form(wf: Workflow, token: str) -> str:
    name, schema = wf.name, wf.input_schema
    fields = []
    if schema:
        required = set(schema.get("required", []))
        for prop_name, raw in (schema.get("properties") or {}).items():
            prop = _resolve(raw, schema)
            kind, nullable = field_kind(raw, schema)
            req = prop_name in required
            label = f'{esc(prop.get("title") or prop_name)}{" *" if req else ""}'
            hint = f'<small>{esc(prop.get("description"))}</small>' if prop.get("description") else ""
            attrs = f'name="{esc(prop_name)}" id="in-{esc(prop_name)}" data-field="{esc(prop_name)}" ' \
                    f'data-kind="{kind}"{" required" if req else ""}'
            default = prop.get("default")
            if kind == "enum":
                opts = "".join(f'<option{" selected" if v == default else ""}>{esc(v)}</option>' for v in prop["enum"])
                control = f"<select {attrs}>{'' if req else '<option></option>'}{opts}</select>"
            elif kind == "boolean":
                control = f'<input type="checkbox" {attrs}{" checked" if default else ""}>'
            elif kind in ("integer", "number"):
                bounds = "".join(f' {html_attr}="{esc(prop[key])}"' for key, html_attr in
                                 (("minimum", "min"), ("maximum", "max")) if key in prop)
                if "exclusiveMinimum" in prop and kind == "integer":
                    bounds += f' min="{esc(prop["exclusiveMinimum"] + 1)}"'
                step = "1" if kind == "integer" else "any"
                value = f' value="{esc(default)}"' if default is not None else ""
                control = f'<input type="number" step="{step}"{bounds}{value} {attrs}>'
            elif kind == "string":
                extra = "".join(f' {a}="{esc(prop[k])}"' for k, a in (("minLength", "minlength"),
                                ("maxLength", "maxlength")) if k in prop)
                pattern = html_pattern(prop.get("pattern"))
                if pattern is not None:  # the title is what the browser's complaint shows
                    extra += f' pattern="{esc(pattern)}" title="must match {esc(prop["pattern"])}"'
                elif prop.get("pattern"):
                    hint += f'<small>must match <code>{esc(prop["pattern"])}</code> (the API checks it)</small>'
                value = f' value="{esc(default)}"' if default is not None else ""
                control = f'<input type="text"{extra}{value} {attrs}>'
            else:
                example = json.dumps(_example(raw, schema))
                value = esc(json.dumps(default)) if default is not None else ""
                control = f'<textarea rows="3" placeholder="{esc(example)}" {attrs}>{value}</textarea>'
                hint += f'<small>JSON{", may be left empty" if not req else ""}: {esc(example)}</small>'
            if nullable and not req:
                hint += "<small>leave empty for none</small>"
            fields.append(f'<label class="field"><span>{label}</span>{control}{hint}</label>')
    else:
        fields.append('<label class="field"><span>input (any JSON object)</span><textarea rows="6" '
                      'id="in-raw" data-raw>{}</textarea></label>')
    fields.append('<label class="field"><span>idempotency token</span><input type="text" id="in-token" '
                  'data-token><small>optional: the same token and input start at most one execution</small></label>')
    body = f"""<h1>Start {esc(name)}</h1><form id="start-form" class="start" data-workflow="{esc(name)}" novalidate>
{''.join(fields)}<div class="buttons"><button type="submit" class="primary" id="start-submit">Start</button></div>
</form><details><summary>input JSON Schema</summary><pre>{esc(json.dumps(schema, indent=2))}</pre></details>"""
    return page(f"Start {name}", body, token)
