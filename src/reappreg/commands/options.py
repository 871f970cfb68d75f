"""Option groups shared by several commands, declared once (not a concern of its own).

A command that takes a group declares one placeholder parameter where the options go, e.g.
``evidence_paths: EvidencePaths = None``, and is decorated with :func:`option_group`:
typer then sees the group's options, in order, at the placeholder's place (same names, help
and defaults as if written out), and the command receives them as one object.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any


def option_group(placeholder: str, options: Mapping[str, tuple[str, Any, Any]],
                 build: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: replace the parameter ``placeholder`` by ``options`` (parameter name ->
    (keyword of ``build``, annotation, typer option)); the command gets ``build(**values)``."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command)
        if placeholder not in signature.parameters:
            raise TypeError(f"{command.__name__}: no parameter {placeholder!r} to put the option group in")
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name != placeholder:
                parameters.append(parameter)
                continue
            parameters += [inspect.Parameter(name, parameter.kind, default=option, annotation=annotation)
                           for name, (_, annotation, option) in options.items()]

        @functools.wraps(command)
        def wrapper(**values: Any) -> Any:
            group = build(**{keyword: values.pop(name) for name, (keyword, _, _) in options.items()})
            return command(**values, **{placeholder: group})

        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        annotations = {k: v for k, v in command.__annotations__.items() if k != placeholder}
        wrapper.__annotations__ = {**annotations, **{name: annotation for name, (_, annotation, _) in options.items()}}
        return wrapper

    return decorate
