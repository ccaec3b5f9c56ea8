"""``/v1/novelty``: the source-only novelty prior, computed synchronously from the loaded corpus index."""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.params import Parameter

from service.app.auth import access
from service.app.novelty.schemas import NoveltyOut, NoveltyRequest
from service.app.novelty.services import novelty_of_passage, novelty_of_text
from service.app.resources import Resources

__all__ = ["NoveltyController"]


class NoveltyController(Controller):
    path = "/v1/novelty"
    tags = ["novelty"]

    # scoring a text costs ~20 ms of CPU: in a worker thread, so the event loop keeps serving polls meanwhile
    @post(
        operation_id="scoreNovelty",
        **access("submit"),
        summary="Source novelty of a text",
        description=(
            "Scores a source text against the corpus index: combined novelty, the four components raw and z-scored, "
            "band (corpus terciles), corpus percentile, five nearest corpus passages and the index signature. "
            "A text identical to a corpus passage gets that passage's stored values."
        ),
        status_code=200,
        sync_to_thread=True,
    )
    def score(self, data: NoveltyRequest, resources: Resources) -> NoveltyOut:
        return novelty_of_text(resources, data.text, data.lang)

    @get(
        "/{passage_id:str}",
        operation_id="getPassageNovelty",
        **access("read"),
        summary="Stored novelty of a corpus passage",
        sync_to_thread=False,
    )
    def passage(
        self,
        passage_id: str,
        resources: Resources,
        lang: str = Parameter(default="pli", description="language of the index to look in", max_length=8),
    ) -> NoveltyOut:
        return novelty_of_passage(resources, passage_id, lang)
