"""Episode -> write plan. Extraction, resolution and contradiction handling live here.

Depends only on `schemas`: reads the graph through the store roles of `kg.schemas.store`
(`Timelines`, and `SearchIndex` for resolution) and hands back a `WritePlan` for the store to
apply. Never imports `retrieval`.
"""

from kg.ingest.hashing import content_hash
from kg.ingest.names import name_key
from kg.ingest.structured import STRUCTURED_EXTRACTOR, plan_structured_episode

__all__ = ["STRUCTURED_EXTRACTOR", "content_hash", "name_key", "plan_structured_episode"]
