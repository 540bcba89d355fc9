"""The CDK feature flags every kiln app is built with: CDK's recommended set, with kiln's decisions.

`new_app` sets them on the App, so every entry point (the cdk CLI through app.py, `kiln report`, `kiln diff`, tests)
synthesizes the same templates. cdk.json's "context" is a copy, so the cdk CLI counts none unconfigured and cannot
override one (its context wins over the App's): edit this dict, then the copy (tests/stacks/test_feature_flags.py
holds the two equal and prints the block).

The keys are aws-cdk-lib 2.275's recommended-feature-flags.json (what `cdk init` writes), in its order, at its
values, except where a comment says why not. A flag can change synthesized templates: each was judged by
synthesizing every example with and without it and reading `kiln.changes.plan`. Of the adopted ones only
recognizeLayerVersion changes what kiln synthesizes (the order of the EKS kubectl handler's layers, an update in
place); the test proves that a cluster deployed with kiln's earlier five flags takes these with nothing created,
replaced or dropped. The ones kept at the old behaviour would fail the next deploy of a deployed cluster, or take
its stacks' tags off.
"""

from __future__ import annotations

FEATURE_FLAGS: dict[str, object] = {
    "@aws-cdk/aws-signer:signingProfileNamePassedToCfn": True,
    "@aws-cdk/aws-ecs-patterns:secGroupsDisablesImplicitOpenListener": True,
    "@aws-cdk/aws-lambda:recognizeLayerVersion": True,
    "@aws-cdk/core:checkSecretUsage": True,
    "@aws-cdk/core:target-partitions": ["aws", "aws-cn"],
    "@aws-cdk-containers/ecs-service-extensions:enableDefaultLogDriver": True,
    "@aws-cdk/aws-ec2:uniqueImdsv2TemplateName": True,
    "@aws-cdk/aws-ecs:arnFormatIncludesClusterName": True,
    "@aws-cdk/aws-iam:minimizePolicies": True,
    "@aws-cdk/core:validateSnapshotRemovalPolicy": True,
    "@aws-cdk/aws-codepipeline:crossAccountKeyAliasStackSafeResourceName": True,
    "@aws-cdk/aws-s3:createDefaultLoggingPolicy": True,
    "@aws-cdk/aws-sns-subscriptions:restrictSqsDescryption": True,
    "@aws-cdk/aws-apigateway:disableCloudWatchRole": True,
    "@aws-cdk/core:enablePartitionLiterals": True,
    "@aws-cdk/aws-events:eventsTargetQueueSameAccount": True,
    "@aws-cdk/aws-ecs:disableExplicitDeploymentControllerForCircuitBreaker": True,
    "@aws-cdk/aws-iam:importedRoleStackSafeDefaultPolicyName": True,
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
    "@aws-cdk/aws-route53-patters:useCertificate": True,
    "@aws-cdk/customresources:installLatestAwsSdkDefault": False,
    "@aws-cdk/aws-rds:databaseProxyUniqueResourceName": True,
    "@aws-cdk/aws-codedeploy:removeAlarmsFromDeploymentGroup": True,
    "@aws-cdk/aws-apigateway:authorizerChangeDeploymentLogicalId": True,
    "@aws-cdk/aws-ec2:launchTemplateDefaultUserData": True,
    "@aws-cdk/aws-secretsmanager:useAttachedSecretResourcePolicyForSecretTargetAttachments": True,
    "@aws-cdk/aws-redshift:columnId": True,
    "@aws-cdk/aws-stepfunctions-tasks:enableEmrServicePolicyV2": True,
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup": True,
    "@aws-cdk/aws-apigateway:requestValidatorUniqueId": True,
    "@aws-cdk/aws-kms:aliasNameRef": True,
    "@aws-cdk/aws-kms:applyImportedAliasPermissionsToPrincipal": True,
    "@aws-cdk/aws-autoscaling:generateLaunchTemplateInsteadOfLaunchConfig": True,
    "@aws-cdk/core:includePrefixInUniqueNameGeneration": True,
    "@aws-cdk/aws-efs:denyAnonymousAccess": True,
    "@aws-cdk/aws-opensearchservice:enableOpensearchMultiAzWithStandby": True,
    "@aws-cdk/aws-lambda-nodejs:useLatestRuntimeVersion": True,
    "@aws-cdk/aws-efs:mountTargetOrderInsensitiveLogicalId": True,
    "@aws-cdk/aws-rds:auroraClusterChangeScopeOfInstanceParameterGroupWithEachParameters": True,
    "@aws-cdk/aws-appsync:useArnForSourceApiAssociationIdentifier": True,
    "@aws-cdk/aws-rds:preventRenderingDeprecatedCredentials": True,
    "@aws-cdk/aws-codepipeline-actions:useNewDefaultBranchForCodeCommitSource": True,
    "@aws-cdk/aws-cloudwatch-actions:changeLambdaPermissionLogicalIdForLambdaAction": True,
    "@aws-cdk/aws-codepipeline:crossAccountKeysDefaultValueToFalse": True,
    "@aws-cdk/aws-codepipeline:defaultPipelineTypeToV2": True,
    "@aws-cdk/aws-kms:reduceCrossAccountRegionPolicyScope": True,
    "@aws-cdk/aws-eks:nodegroupNameAttribute": True,
    "@aws-cdk/aws-eks:useNativeOidcProvider": True,
    "@aws-cdk/aws-ec2:ebsDefaultGp3Volume": True,
    "@aws-cdk/aws-ecs:removeDefaultDeploymentAlarm": True,
    "@aws-cdk/custom-resources:logApiResponseDataPropertyTrueDefault": False,
    "@aws-cdk/aws-s3:keepNotificationInImportedBucket": False,
    # Off (CDK recommends on): kiln tags each stack with Tags.of(stack), which tags the stack itself too. On, it reaches
    # only the resources: every deployed stack would lose its own tags on the next deploy, and the CI reaper, which
    # deletes only stacks tagged as its environment's (kiln_reaper.teardown), would leave the environment running.
    "@aws-cdk/core:explicitStackTags": False,
    "@aws-cdk/aws-ecs:reduceEc2FargateCloudWatchPermissions": True,
    "@aws-cdk/aws-dynamodb:resourcePolicyPerReplica": True,
    "@aws-cdk/aws-ec2:ec2SumTImeoutEnabled": True,
    "@aws-cdk/aws-appsync:appSyncGraphQLAPIScopeLambdaPermission": True,
    "@aws-cdk/aws-rds:setCorrectValueForDatabaseInstanceReadReplicaInstanceResourceId": True,
    "@aws-cdk/core:cfnIncludeRejectComplexResourceUpdateCreatePolicyIntrinsics": True,
    "@aws-cdk/aws-lambda-nodejs:sdkV3ExcludeSmithyPackages": True,
    "@aws-cdk/aws-stepfunctions-tasks:fixRunEcsTaskPolicy": True,
    "@aws-cdk/aws-ec2:bastionHostUseAmazonLinux2023ByDefault": True,
    "@aws-cdk/aws-route53-targets:userPoolDomainNameMethodWithoutCustomResource": True,
    "@aws-cdk/aws-elasticloadbalancingV2:albDualstackWithoutPublicIpv4SecurityGroupRulesDefault": True,
    "@aws-cdk/aws-iam:oidcRejectUnauthorizedConnections": True,
    "@aws-cdk/core:enableAdditionalMetadataCollection": True,
    "@aws-cdk/aws-lambda:createNewPoliciesWithAddToRolePolicy": False,
    "@aws-cdk/aws-s3:setUniqueReplicationRoleName": True,
    "@aws-cdk/aws-events:requireEventBusPolicySid": True,
    "@aws-cdk/core:aspectPrioritiesMutating": True,
    "@aws-cdk/aws-dynamodb:retainTableReplica": True,
    "@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2": True,
    "@aws-cdk/s3-notifications:addS3TrustKeyPolicyForSnsSubscriptions": True,
    "@aws-cdk/aws-ec2:requirePrivateSubnetsForEgressOnlyInternetGateway": True,
    "@aws-cdk/aws-s3:publicAccessBlockedByDefault": True,
    # Off (CDK recommends on): on, CDK's own functions (the EKS kubectl provider, the bucket deployment) get a log
    # group /aws/lambda/<function>, which Lambda already made on their first run in every deployed cluster: the
    # create fails ("already exists") and rolls the deploy back (the flag's own text: "DO NOT ENABLE" for an app
    # whose functions have run; aws/aws-cdk#34612).
    "@aws-cdk/aws-lambda:useCdkManagedLogGroup": False,
    "@aws-cdk/aws-elasticloadbalancingv2:networkLoadBalancerWithSecurityGroupByDefault": True,
    "@aws-cdk/aws-ecs-patterns:uniqueTargetGroupId": True,
    "@aws-cdk/aws-route53-patterns:useDistribution": True,
    "@aws-cdk/aws-cloudfront:defaultFunctionRuntimeV2_0": True,
    "@aws-cdk/aws-elasticloadbalancingv2:usePostQuantumTlsPolicy": True,
    "@aws-cdk/aws-batch:defaultToAL2023": True,
    "@aws-cdk/aws-eks:defaultToAL2023": True,
    "@aws-cdk/core:annotationsInValidationReport": True,
    # Exports, as every kiln release has deployed (CDK recommends "weak"): CloudFormation refuses a change to an export
    # in use, with a rollback, and `kiln diff` names it first. "both"/"weak" (Fn::GetStackOutput) would replace the file
    # system and the cluster on the switching deploy (every create-only property fed across stacks: aws/aws-cdk#38829),
    # and then leave a reader on a replaced or deleted value until its own template changes (Fn::GetStackOutput's page).
    "@aws-cdk/core:defaultCrossStackReferences": "strong",
    "@aws-cdk/core:validateAgainstDefaultRules": True,
    "@aws-cdk/aws-ecs:removeEmptyLoadBalancers": True,
    "@aws-cdk/aws-cloudfront:defaultViewerProtocolPolicyRedirectToHttps": True,
    "@aws-cdk/aws-apigateway:logGroupDestinationArnWithoutWildcard": True,
}
