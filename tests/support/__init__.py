"""What the tests share that is not a fixture: the guide's deployment as data (guide), Kthena's
pod names and labels (kthena_pods), rendered containers run as local processes (localpods),
NetworkPolicy semantics (netpol), stand-in nodes (nodes), the stand-in OpenAI server
(openai_standin, also run as a script), the PD judge of the e2e runs (pdcheck) and the PD
proxy's command line (proxyargs).

The tests import it as `support`: pytest's default import mode puts tests/, the folder of
conftest.py and of the test modules (not a package), on sys.path. mypy checks it
(pyproject.toml, [tool.mypy])."""
