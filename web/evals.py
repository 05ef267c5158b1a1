"""The console's eval pages: the tenant's evals with their newest runs, and one run's graded
items (input, output, each grader's score and pass), a bounded page at a time.

Read-only: evals and runs are made with `/v1/evals` (OpenAI's SDK) or by a gated fine-tune.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from litestar import Controller, get
from litestar.di import Provide
from litestar.params import PathParameter
from litestar.response import Template
from sqlalchemy.ext.asyncio import AsyncSession

from loraplex.web.console import provide_tenant_id
from loraplex.web.eval_reads import eval_index, run_page
from loraplex.web.paging import PageAsked, page_number

PublicId = Annotated[str, PathParameter(max_length=64)]


class EvalPages(Controller):
    """`/console/evals` (the list) and `/console/evals/{eval_id}/runs/{run_id}` (one run)."""

    path = "/console/evals"
    dependencies = {"tenant_id": Provide(provide_tenant_id, sync_to_thread=False)}

    @get("/", name="console.evals")
    async def index(
        self, tenant_id: UUID, db_session: AsyncSession, page_asked: PageAsked = ""
    ) -> Template:
        """The tenant's evals, newest first, each with its newest runs and their pass rates."""
        index = await eval_index(db_session, tenant_id, page_number(page_asked))
        return Template("console/evals.html", context={"index": index})

    @get("/{eval_id:str}/runs/{run_id:str}", name="console.eval_run")
    async def run(
        self,
        tenant_id: UUID,
        eval_id: PublicId,
        run_id: PublicId,
        db_session: AsyncSession,
        page_asked: PageAsked = "",
    ) -> Template:
        """A run's counts and per-criterion pass rates, and a page of its graded items."""
        view = await run_page(db_session, tenant_id, eval_id, run_id, page_number(page_asked))
        return Template("console/eval_run.html", context={"v": view})
