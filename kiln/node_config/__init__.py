"""spec -> the nodes' bootstrap configuration, without the CDK: what a spec's nodes run (translate), their boot
budget (budget) and the judgement `kiln validate` prints (judge). Above kiln.spec and kiln.bootstrap; the stacks,
the local cluster and the commands import it, never the other way."""
