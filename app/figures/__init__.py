"""Pure figure builders: data in, ``plotly.graph_objects.Figure`` out. The dashboard and the static snapshot
share them, so nothing here reads a job, a request or a cache."""
