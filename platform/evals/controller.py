"""OpenAI's Evals routes: /v1/evals, its runs and their output items."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from litestar import Controller, Request, delete, get, post
from litestar.params import Parameter
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.auth import access
from loraplex.auth.principal import Principal, Scope
from loraplex.errors import Forbidden
from loraplex.evals.objects import EVAL, RUN, eval_object, item_object, run_object
from loraplex.evals.schemas import MAX_EVAL_BODY, MAX_RUN_BODY, EvalCreate, RunCreate
from loraplex.evals.service import EvalService
from loraplex.finetune.ids import public
from loraplex.finetune.queue import JobQueue
from loraplex.gateway.body_limits import decode_json

Limit = Annotated[int, Parameter(ge=1, le=100)]
EVALS = access.tenant(Scope.INFERENCE)
EVAL_PATH = "/v1/evals/{eval_id:str}"
RUN_PATH = EVAL_PATH + "/runs/{run_id:str}"
Body = TypeVar("Body")


def _tenant(principal: Principal) -> Any:
    if principal.tenant_id is None:
        raise Forbidden("evals run as a tenant: use a tenant API key with the 'inference' scope")
    return principal.tenant_id


async def _decode(request: Request[Any, Any, Any], kind: type[Body]) -> Body:
    """As every /v1 body: objects and arrays counted before decoding, which runs with the GC
    paused (a run of 200k inline items paused another tenant's stream ~100 ms before)."""
    return decode_json(await request.body(), kind, lambda _: None)


def _page(rows: list[Any], limit: int, shape: Any) -> dict[str, Any]:
    data = [shape(row) for row in rows[:limit]]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(rows) > limit,
    }


class EvalsController(Controller):
    """Evals, runs and output items, shaped like OpenAI's so its SDK drives them."""

    tags = ["evals"]

    @post(
        "/v1/evals",
        operation_id="CreateEval",
        opt=EVALS,
        status_code=200,
        request_max_body_size=MAX_EVAL_BODY,
    )
    async def create_eval(
        self, request: Request[Any, Any, Any], principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """Create an eval: an item schema and its testing criteria."""
        data = await _decode(request, EvalCreate)
        row = await EvalService(db_session).create(_tenant(principal), data, principal.actor)
        return eval_object(row)

    @get("/v1/evals", operation_id="ListEvals", opt=EVALS)
    async def list_evals(
        self,
        principal: Principal,
        db_session: AsyncSession,
        limit: Limit = 20,
        after: str | None = None,
    ) -> dict[str, Any]:
        """The tenant's evals, newest first."""
        rows = await EvalService(db_session).list(_tenant(principal), limit + 1, after)
        return _page(rows, limit, eval_object)

    @get(EVAL_PATH, operation_id="RetrieveEval", opt=EVALS)
    async def get_eval(
        self, eval_id: str, principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """One eval."""
        return eval_object(await EvalService(db_session).get(_tenant(principal), eval_id))

    @delete(EVAL_PATH, operation_id="DeleteEval", opt=EVALS, status_code=200)
    async def delete_eval(
        self, eval_id: str, principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """Delete an eval, its runs and their output items."""
        row = await EvalService(db_session).delete(_tenant(principal), eval_id, principal.actor)
        return {"object": "eval.deleted", "deleted": True, "eval_id": public(EVAL, row.id)}

    @post(
        EVAL_PATH + "/runs",
        operation_id="CreateEvalRun",
        opt=EVALS,
        status_code=200,
        request_max_body_size=MAX_RUN_BODY,
    )
    async def create_run(
        self,
        eval_id: str,
        request: Request[Any, Any, Any],
        principal: Principal,
        db_session: AsyncSession,
        job_queue: JobQueue,
    ) -> dict[str, Any]:
        """Start a run: a worker generates an answer to every item and grades it."""
        data = await _decode(request, RunCreate)
        run = await EvalService(db_session).create_run(
            _tenant(principal), eval_id, data, principal.actor, job_queue
        )
        return run_object(run)

    @get(EVAL_PATH + "/runs", operation_id="ListEvalRuns", opt=EVALS)
    async def list_runs(
        self,
        eval_id: str,
        principal: Principal,
        db_session: AsyncSession,
        limit: Limit = 20,
        after: str | None = None,
    ) -> dict[str, Any]:
        """The eval's runs, newest first."""
        evals = EvalService(db_session)
        rows = await evals.runs(await evals.get(_tenant(principal), eval_id), limit + 1, after)
        return _page(rows, limit, run_object)

    @get(RUN_PATH, operation_id="RetrieveEvalRun", opt=EVALS)
    async def get_run(
        self, eval_id: str, run_id: str, principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """One run: its status, result counts and per-criterion results."""
        return run_object(await EvalService(db_session).run(_tenant(principal), eval_id, run_id))

    @post(RUN_PATH + "/cancel", operation_id="CancelEvalRun", opt=EVALS, status_code=200)
    async def cancel_run(
        self, eval_id: str, run_id: str, principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """Cancel a queued or running run."""
        run = await EvalService(db_session).cancel_run(
            _tenant(principal), eval_id, run_id, principal.actor
        )
        return run_object(run)

    @delete(RUN_PATH, operation_id="DeleteEvalRun", opt=EVALS, status_code=200)
    async def delete_run(
        self, eval_id: str, run_id: str, principal: Principal, db_session: AsyncSession
    ) -> dict[str, Any]:
        """Delete a run and its output items."""
        run = await EvalService(db_session).delete_run(
            _tenant(principal), eval_id, run_id, principal.actor
        )
        return {"object": "eval.run.deleted", "deleted": True, "run_id": public(RUN, run.id)}

    @get(RUN_PATH + "/output_items", operation_id="ListEvalRunOutputItems", opt=EVALS)
    async def list_items(
        self,
        eval_id: str,
        run_id: str,
        principal: Principal,
        db_session: AsyncSession,
        limit: Limit = 20,
        after: str | None = None,
        status: Literal["pass", "fail", "error"] | None = None,
    ) -> dict[str, Any]:
        """The run's output items, in data source order."""
        evals = EvalService(db_session)
        run = await evals.run(_tenant(principal), eval_id, run_id)
        rows = await evals.items(run, limit + 1, after, status)
        return _page(rows, limit, lambda row: item_object(row, run))

    @get(
        RUN_PATH + "/output_items/{item_id:str}",
        operation_id="RetrieveEvalRunOutputItem",
        opt=EVALS,
    )
    async def get_item(
        self,
        eval_id: str,
        run_id: str,
        item_id: str,
        principal: Principal,
        db_session: AsyncSession,
    ) -> dict[str, Any]:
        """One output item: the item, the model's sample and each criterion's result."""
        evals = EvalService(db_session)
        run = await evals.run(_tenant(principal), eval_id, run_id)
        return item_object(await evals.item(run, item_id), run)
