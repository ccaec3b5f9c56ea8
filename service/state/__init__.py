"""What trisk keeps: the durable store, the records store over it, the job lanes and worker registry in Redis,
companion judge jobs, the risk catalog."""
