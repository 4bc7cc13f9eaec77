"""The faults a local run can inject: function environment and cache restarts, storage faults
for the chaos trials, Lambda service errors. Imports only local.servers."""
