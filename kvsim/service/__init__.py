"""kvsim's web page and service API (`kvsim ui`): the planner's questions as jobs over HTTP, answered by the
same commands as the CLI. Needs the `ui` extra (FastAPI, uvicorn, plotly)."""
