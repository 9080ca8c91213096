"""Errors that the CLI turns into exit codes: 2 bad input, 3 infeasible, 1 internal."""

from __future__ import annotations


def first_line(e: BaseException, limit: int = 500) -> str:
    """An exception as one short line (its type and its message's first line), for a BadInput paragraph."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:limit]


class HetcError(Exception):
    exit_code = 1


class BadInput(HetcError):
    """Input the user can fix. Rendered as one paragraph: file, field, problem, fix."""

    exit_code = 2

    def __init__(self, problem: str, *, file: str | None = None, field: str | None = None, fix: str | None = None):
        self.problem, self.file, self.field, self.fix = problem, file, field, fix
        where = ": ".join(str(p) for p in (file, field) if p)
        text = f"{where}: {problem}" if where else problem
        if fix:
            text += f" Fix: {fix}"
        super().__init__(text)


class Infeasible(HetcError):
    """No placement satisfies the constraints; the message names the constraint and the shortfall."""

    exit_code = 3
