# shellcheck shell=bash
# KILN_NAME='value' files (bundle.env, cluster.env, the image's markers), read without executing a line of them,
# and what bundle.env asks for. Sourced by lib.sh, never run.

# Split line $2 of a KILN_NAME='value' file ($1 says where: FILE:NUMBER) into KILN_ENV_KEY and KILN_ENV_VALUE,
# outer quotes off; false for a blank or comment line, the end of the bootstrap for any other shape.
parse_env_line() {
  local where="$1" line="$2"
  if [[ -z "$line" || "$line" == \#* ]]; then
    return 1
  fi
  if [[ ! "$line" =~ ^(KILN_[A-Z0-9_]+)=(.*)$ ]]; then
    die "${where}: expected KILN_NAME='value', got: ${line}"
  fi
  KILN_ENV_KEY="${BASH_REMATCH[1]}"
  KILN_ENV_VALUE="${BASH_REMATCH[2]}"
  if [[ "$KILN_ENV_VALUE" == \'*\' && ${#KILN_ENV_VALUE} -ge 2 ]]; then
    KILN_ENV_VALUE="${KILN_ENV_VALUE:1:${#KILN_ENV_VALUE}-2}"
  fi
}

# Export the KILN_NAME='value' lines of file $1; nothing in the file is executed.
load_env_file() {
  local file="$1" line number=0
  [[ -r "$file" ]] || die "cannot read ${file}"
  while IFS= read -r line || [[ -n "$line" ]]; do
    number=$((number + 1))
    if parse_env_line "${file}:${number}" "$line"; then
      export "${KILN_ENV_KEY}=${KILN_ENV_VALUE}"
    fi
  done <"$file"
}

# Print the value that KILN_NAME='value' file $1 gives variable $2; false when it gives none. Sets nothing else.
env_file_value() {
  local file="$1" name="$2" line number=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    number=$((number + 1))
    if parse_env_line "${file}:${number}" "$line" && [[ "$KILN_ENV_KEY" == "$name" ]]; then
      printf '%s\n' "$KILN_ENV_VALUE"
      return 0
    fi
  done <"$file"
  return 1
}

# Print bundle.env's value FIELD $3 of the artifact or repository $2 (KIND $1: ARTIFACT or REPO): the variable
# KILN_<KIND>_<NAME>_<FIELD>, '' where unset.
bundle_value() {
  local var="KILN_${1}_${2^^}_${3}"
  var="${var//-/_}"
  printf '%s' "${!var:-}"
}

# True when the bundle asks for exporter $1 (install_exporters and configure_exporters share it).
exporter_wanted() {
  [[ " ${KILN_EXPORTERS:-} " == *" $1 "* ]]
}
