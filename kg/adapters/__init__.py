"""kg as the memory of agent frameworks, each through the framework's own interface.

One module per framework, each imported only when used (its framework is an extra):
`kg.adapters.langgraph.KGStore` (LangGraph's long-term `BaseStore`, extra `langgraph`),
`kg.adapters.langchain.KGRetriever` (a LangChain `BaseRetriever`, extra `langchain`) and
`kg.adapters.llamaindex.KGRetriever` (a LlamaIndex `BaseRetriever`, extra `llamaindex`).
Each wraps either the embedded `KG` or a `kg.client.AsyncClient`: they share the method
names the adapters call (`search`, `facts`, `add_episode`), and kg.adapters.memory reads
both kinds of answer as the shared views. See docs/adapters.md.
"""
