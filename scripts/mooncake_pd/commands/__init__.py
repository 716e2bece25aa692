"""One module per `mooncake-pd` command: its `register(sub)` declares the command's options next
to `run(args)`, the code that carries it out."""

from mooncake_pd.commands import autoscale, bench, chartcheck, docs, generate, golden, render, schema, update, verify

# In the order `mooncake-pd --help` lists them.
ALL = (render, generate, update, verify, bench, golden, schema, docs, chartcheck, autoscale)
