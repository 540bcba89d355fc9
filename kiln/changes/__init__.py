"""What deploying new templates over deployed ones does: which resources it replaces, and what CloudFormation refuses.

Pure: templates in (as CloudFormation reads them), findings out; no CDK and no AWS call. `kiln diff` feeds it the
templates of a spec and those of the deployed stacks (or of another spec); tests feed it two synthesized specs.

- A resource is replaced when a create-only property changes: the resource schemas cfn-lint ships name them
  (`createOnlyProperties`), and platforms.json adds the nested ones a schema without handlers leaves out.
  A replaced resource changes its physical id, so a create-only property that refers to it changes too.
- CloudFormation refuses to replace a resource with a custom name (it would collide with itself), to create one
  under a name an old resource still holds in the same scope, and to change or remove an export another stack
  imports (where the importer's new template no longer imports it, the order that works is the importer first,
  alone); each rolls the deploy back.
- A replaced or removed stateful resource (a file system, a bucket, a cluster, a workspace, a key, logs) deploys,
  but starts empty, or is deleted with its data, or stays behind outside the stack.

Not judged: custom resources (their provider decides what a change replaces), and values that only resolve at
deploy time (parameters, dynamic references).

The modules, each on its own concern: `schemas` (what a resource type fixes at creation), `templates` (reading
templates and cloud assemblies), `replacement` (one stack: create, update, replace, name collisions), `deploy` (the
app: exports and weak references across stacks), `directions` (properties a service changes one way only: FSx's
storage capacity grows, EKS's and PCS's versions move up only; judged on templates and, for `kiln validate
--before`, on specs), `rolls` (node groups whose jobs a deploy ends or waits for: EKS groups rolled, resized,
replaced or removed; PCS groups replaced or removed; HyperPod instance groups removed, made smaller or given another
type), `links` (links between a file system and S3 that a deploy would create on a directory an old link still
holds), `subnets` (subnets a deploy would create on the addresses of one it drops), `findings` (the lines),
`teardown` (`cdk destroy` and a redeploy), `parallelcluster` (what ParallelCluster's own update check refuses
though CloudFormation would take it: the settings that change between two cluster configurations, each judged by
its update policy on a cluster in use; import it from there, its names are ParallelCluster's alone).
"""

from kiln.changes.deploy import blocked_exports, plan
from kiln.changes.directions import OneWayChange, OneWayRule, one_way_changes, one_way_rules, spec_one_way_changes
from kiln.changes.findings import (
    CUSTOM_NAME_RULE,
    EXPORT_RULE,
    STATEFUL,
    Action,
    BlockedExport,
    Collision,
    Plan,
    Removal,
    Replacement,
)
from kiln.changes.links import LinkCollision, link_collisions
from kiln.changes.replacement import (
    VOLATILE_ATTRIBUTES,
    StackChanges,
    actions,
    collisions,
    removals,
    replacements,
    stack_changes,
)
from kiln.changes.rolls import (
    GroupDeleted,
    InstanceGroupShrunk,
    InstanceTypeChanged,
    NodeRoll,
    Resize,
    deleted_groups,
    node_rolls,
    resizes,
    retyped_instance_groups,
    shrunk_instance_groups,
)
from kiln.changes.schemas import (
    DEFAULT_REGION,
    SchemasUnavailable,
    create_only,
    documented_replacements,
    has_handlers,
    name_properties,
    scope_properties,
)
from kiln.changes.subnets import SubnetCollision, subnet_collisions
from kiln.changes.teardown import (
    Dangling,
    dangling_references,
    deletion_order,
    fixed_names,
    imports_out_of_order,
    retained,
)
from kiln.changes.templates import (
    RETAINED,
    assembly_dependencies,
    assembly_templates,
    attribute_references,
    exports,
    importers,
    imports,
    references,
    stack_outputs_read,
)

__all__ = [
    "LinkCollision",
    "link_collisions",
    "SubnetCollision",
    "subnet_collisions",
    "GroupDeleted",
    "InstanceGroupShrunk",
    "InstanceTypeChanged",
    "NodeRoll",
    "OneWayChange",
    "OneWayRule",
    "one_way_changes",
    "one_way_rules",
    "spec_one_way_changes",
    "CUSTOM_NAME_RULE",
    "DEFAULT_REGION",
    "EXPORT_RULE",
    "RETAINED",
    "STATEFUL",
    "VOLATILE_ATTRIBUTES",
    "Action",
    "BlockedExport",
    "Collision",
    "Dangling",
    "Plan",
    "Removal",
    "Replacement",
    "Resize",
    "SchemasUnavailable",
    "StackChanges",
    "actions",
    "assembly_dependencies",
    "assembly_templates",
    "attribute_references",
    "blocked_exports",
    "collisions",
    "create_only",
    "dangling_references",
    "deleted_groups",
    "deletion_order",
    "documented_replacements",
    "exports",
    "fixed_names",
    "has_handlers",
    "importers",
    "imports",
    "imports_out_of_order",
    "name_properties",
    "plan",
    "references",
    "removals",
    "node_rolls",
    "replacements",
    "resizes",
    "retyped_instance_groups",
    "shrunk_instance_groups",
    "retained",
    "scope_properties",
    "stack_changes",
    "stack_outputs_read",
]
