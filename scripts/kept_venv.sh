# Sourced by the set-up scripts whose virtualenv holds nothing of this checkout (./.venv-keras,
# ./.venv-mlflow-server; ./.venv has the package installed editable, so it stays in the checkout). Such a virtualenv
# is kept where the install checks keep theirs (tests/kept_venv.py: $APH_VENV_CACHE, default
# ~/.cache/airflow-provider-horovod/venvs), in a folder named by its inputs' hash, and the checkout's path is a link
# to it: a fresh clone, as CI runs, finds it made, and it is made again as soon as an input changes. One version
# per name is kept.

kept_venv_link() {  # kept_venv_link NAME KEY LINK: print the kept folder NAME-KEY; LINK (in the checkout) points at it
  local name=$1 key=$2 link=$3 root old
  root=${APH_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-horovod/venvs}
  mkdir -p "$root"
  for old in "$root/$name"-*; do
    [ -e "$old" ] && [ "$old" != "$root/$name-$key" ] && rm -rf "$old"
  done
  if [ -e "$link" ] && [ ! -L "$link" ]; then
    rm -rf "$link"  # a virtualenv made in the checkout by an earlier version of these scripts
  fi
  ln -sfn "$root/$name-$key" "$link"
  echo "$root/$name-$key"
}
