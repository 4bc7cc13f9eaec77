"""CDK constructs of the FasDL stack; app.py composes them through infra.stack."""
