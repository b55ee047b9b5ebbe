/**
 * `powerstore completion bash|zsh|fish`: a shell completion script generated from the
 * commander program itself (its commands, their options and arguments, the global
 * options), so a new command or option is completed without anyone editing a script.
 * Option values and arguments named `file` or `dir` complete file names; those with
 * choices complete the choices; keys complete nothing (they live on the servers).
 */
import type { Argument, Command, Option } from 'commander';

/** The shells a script is generated for. */
export const SHELLS = ['bash', 'zsh', 'fish'] as const;
export type Shell = (typeof SHELLS)[number];

/** An option as the scripts need it. */
interface OptionSpec {
  /** `-r`, `--recursive`: every name it goes by. */
  readonly names: readonly string[];
  readonly short: string | undefined;
  readonly long: string | undefined;
  readonly takesValue: boolean;
  /** Its value's name in the flags (`<ms>`: `ms`). */
  readonly valueName: string;
  /** Its value is a file name (`<file>`, `<dir>`). */
  readonly file: boolean;
  readonly choices: readonly string[] | undefined;
  /** Given more than once it adds up (`--grant`, `--cap`): its default is a list. */
  readonly repeatable: boolean;
  readonly description: string;
}

/** A positional argument: completes a file name, a choice, or nothing. */
interface ArgumentSpec {
  readonly name: string;
  readonly required: boolean;
  readonly variadic: boolean;
  readonly file: boolean;
  readonly choices: readonly string[] | undefined;
}

interface CommandSpec {
  readonly name: string;
  readonly description: string;
  readonly options: readonly OptionSpec[];
  readonly args: readonly ArgumentSpec[];
}

interface ProgramSpec {
  readonly name: string;
  readonly globals: readonly OptionSpec[];
  readonly commands: readonly CommandSpec[];
}

const FILE_NAMES = new Set(['file', 'dir', 'directory', 'path']);

/** A description's first clause, short enough for a completion menu. */
function brief(description: string): string {
  const clause = description.split(/; | \(|: /)[0]!.trim();
  if (clause.length <= 60) return clause;
  return `${clause.slice(0, 60).replace(/\s+\S*$/, '')}…`;
}

function optionSpec(option: Option): OptionSpec {
  const names = [option.short, option.long].filter((n): n is string => n !== undefined);
  const value = /[<[]([^>\]]+)[>\]]/.exec(option.flags)?.[1];
  return {
    names,
    short: option.short,
    long: option.long,
    takesValue: option.required || option.optional,
    valueName: value ?? 'value',
    file: value !== undefined && FILE_NAMES.has(value),
    choices: option.argChoices,
    repeatable: Array.isArray(option.defaultValue),
    description: brief(option.description),
  };
}

function argumentSpec(argument: Argument, commandNames: readonly string[], isHelp: boolean): ArgumentSpec {
  return {
    name: argument.name(),
    required: argument.required,
    variadic: argument.variadic,
    file: FILE_NAMES.has(argument.name()),
    // `help [command]` completes the commands.
    choices: argument.argChoices ?? (isHelp ? commandNames : undefined),
  };
}

/** What a script completes, read from the program (help's view of it: with `help` and `--help`). */
function specOf(program: Command): ProgramSpec {
  const help = program.createHelp();
  const commands = help.visibleCommands(program);
  const names = commands.map((c) => c.name());
  const helpCommand = commands.find((c) => c.name() === 'help' && c.registeredArguments.some((a) => a.name() === 'command'));
  const globals = help.visibleOptions(program).map(optionSpec);
  // Every command has --help, as the program has: completed once, as a global option.
  const globalNames = new Set(globals.flatMap((o) => o.names));
  return {
    name: program.name(),
    globals,
    commands: commands.map((c) => ({
      name: c.name(),
      description: brief(c.description()),
      options: help
        .visibleOptions(c)
        .map(optionSpec)
        .filter((o) => !o.names.some((n) => globalNames.has(n))),
      args: c.registeredArguments.map((a) =>
        argumentSpec(
          a,
          names.filter((n) => n !== 'help'),
          c === helpCommand,
        ),
      ),
    })),
  };
}

/** The completion script for `shell`, for the program's commands and options as they are now. */
export function completionScript(program: Command, shell: Shell): string {
  const spec = specOf(program);
  switch (shell) {
    case 'bash':
      return bashScript(spec);
    case 'zsh':
      return zshScript(spec);
    case 'fish':
      return fishScript(spec);
  }
}

/** A name safe to leave unquoted in a script (an identifier's characters). */
function checkName(name: string): string {
  if (!/^[A-Za-z0-9_.-]+$/.test(name)) throw new Error(`completion: ${JSON.stringify(name)} is not a plain name`);
  return name;
}

/** `s` in POSIX single quotes (bash, zsh). */
const shQuote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

function bashScript(spec: ProgramSpec): string {
  const fn = `_${checkName(spec.name).replaceAll(/[.-]/g, '_')}`;
  const all = [...spec.globals, ...spec.commands.flatMap((c) => c.options)];
  const valued = [...new Set(all.filter((o) => o.takesValue).flatMap((o) => o.names.map(checkName)))];
  const fileValued = [...new Set(all.filter((o) => o.takesValue && o.file).flatMap((o) => o.names))];
  const choiceValued = all.filter((o) => o.takesValue && o.choices);
  const words = (...options: (readonly OptionSpec[])[]) => options.flatMap((list) => list.flatMap((o) => o.names.map(checkName))).join(' ');
  const complete = (arg: ArgumentSpec) =>
    arg.file ? `${fn}_files` : arg.choices ? `COMPREPLY=($(compgen -W ${shQuote(arg.choices.map(checkName).join(' '))} -- "$cur"))` : ':';
  const commandCases = spec.commands.map((c) => {
    const positions = c.args.map((a, i) => `        ${a.variadic ? '*' : String(i)}) ${complete(a)} ;;`);
    // A variadic argument takes every position from its own on.
    const variadic = c.args.findIndex((a) => a.variadic);
    if (variadic >= 0) positions[variadic] = `        *) ((n >= ${variadic})) && ${complete(c.args[variadic]!)} ;;`;
    return [
      `    ${checkName(c.name)})`,
      `      if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W ${shQuote(words(c.options, spec.globals))} -- "$cur")); return; fi`,
      `      case $n in`,
      ...positions,
      `      esac ;;`,
    ].join('\n');
  });
  return `# ${spec.name} completion for bash, generated by \`${spec.name} completion bash\`. Install it:
#   ${spec.name} completion bash > ~/.local/share/bash-completion/completions/${spec.name}
# or add to ~/.bashrc: source <(${spec.name} completion bash)

${fn}_files() {
  local IFS=$'\\n'
  COMPREPLY=($(compgen -f -- "$cur"))
  compopt -o filenames 2>/dev/null
}

${fn}() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]}
  local cmd= w i n=0
  # Options taking a value: the word after one is its value, not an argument.
  local valued=' ${valued.join(' ')} '
  COMPREPLY=()
  # The command, and how many of its arguments come before the word being completed.
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=\${COMP_WORDS[i]}
    if [[ $w == -* ]]; then
      [[ $valued == *" $w "* ]] && ((i++))
    elif [[ -z $cmd ]]; then
      cmd=$w
    else
      ((n++))
    fi
  done
  if [[ $valued == *" $prev "* ]]; then
    case $prev in
${[
  ...(fileValued.length > 0 ? [`      ${fileValued.join('|')}) ${fn}_files ;;`] : []),
  ...choiceValued.map(
    (o) => `      ${o.names.join('|')}) COMPREPLY=($(compgen -W ${shQuote(o.choices!.map(checkName).join(' '))} -- "$cur")) ;;`,
  ),
].join('\n')}
    esac
    return
  fi
  if [[ -z $cmd ]]; then
    if [[ $cur == -* ]]; then
      COMPREPLY=($(compgen -W ${shQuote(words(spec.globals))} -- "$cur"))
    else
      COMPREPLY=($(compgen -W ${shQuote(spec.commands.map((c) => checkName(c.name)).join(' '))} -- "$cur"))
    fi
    return
  fi
  case $cmd in
${commandCases.join('\n')}
  esac
}

complete -F ${fn} ${spec.name}
`;
}

/**
 * `s` inside the brackets of a zsh `_arguments` spec, or after the colon of a `_describe`
 * item: no brackets, which would end the description early.
 */
const zshText = (s: string) => s.replaceAll('[', '(').replaceAll(']', ')');

function zshScript(spec: ProgramSpec): string {
  const fn = `_${checkName(spec.name).replaceAll(/[.-]/g, '_')}`;
  const action = (o: { file: boolean; choices: readonly string[] | undefined }) =>
    o.file ? '_files' : o.choices ? `(${o.choices.map(checkName).join(' ')})` : ' ';
  const optionSpecs = (o: OptionSpec) =>
    o.names.map((name) =>
      shQuote(`${o.repeatable ? '*' : ''}${name}[${zshText(o.description)}]${o.takesValue ? `:${o.valueName}:${action(o)}` : ''}`),
    );
  const argumentSpecs = (args: readonly ArgumentSpec[]) =>
    args.map((a, i) => shQuote(`${a.variadic ? '*' : String(i + 1)}${a.required || a.variadic ? '' : ':'}:${a.name}:${action(a)}`));
  const lines = (specs: readonly string[], indent: string) => specs.map((s) => `${indent}${s}`).join(' \\\n');
  return `#compdef ${spec.name}
# ${spec.name} completion for zsh, generated by \`${spec.name} completion zsh\`. Install it, after compinit
# in ~/.zshrc: source <(${spec.name} completion zsh)
# or as a file in a directory of $fpath: ${spec.name} completion zsh > ~/.zfunc/_${spec.name}

${fn}() {
  local curcontext=$curcontext state line ret=1
  typeset -A opt_args
  local -a globals
  globals=(
${lines(spec.globals.flatMap(optionSpecs), '    ')}
  )
  _arguments -C $globals '1: :->command' '*:: :->argument' && ret=0
  case $state in
    command)
      local -a commands
      commands=(
${spec.commands.map((c) => `        ${shQuote(`${checkName(c.name)}:${zshText(c.description)}`)}`).join('\n')}
      )
      _describe -t commands '${spec.name} command' commands && ret=0
      ;;
    argument)
      curcontext=\${curcontext%:*:*}:${spec.name}-$words[1]:
      case $words[1] in
${spec.commands
  .map((c) =>
    [
      `        ${checkName(c.name)})`,
      `          _arguments $globals \\`,
      `${lines([...c.options.flatMap(optionSpecs), ...argumentSpecs(c.args)], '            ')} && ret=0`,
      `          ;;`,
    ].join('\n'),
  )
  .join('\n')}
      esac
      ;;
  esac
  return ret
}

if [[ $funcstack[1] == ${fn} ]]; then
  ${fn} "$@"
else
  compdef ${fn} ${spec.name}
fi
`;
}

/** `s` in fish's single quotes. */
const fishQuote = (s: string) => `'${s.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;

function fishScript(spec: ProgramSpec): string {
  const name = checkName(spec.name);
  const option = (o: OptionSpec, condition?: string) =>
    [
      `complete -c ${name}`,
      ...(condition ? [`-n ${fishQuote(condition)}`] : []),
      ...(o.short ? [`-s ${checkName(o.short.slice(1))}`] : []),
      ...(o.long ? [`-l ${checkName(o.long.slice(2))}`] : []),
      // -r: takes a value; -F: a file name; -x: a value that is not one.
      ...(o.takesValue ? [o.file ? '-r -F' : o.choices ? `-x -a ${fishQuote(o.choices.join(' '))}` : '-x'] : []),
      `-d ${fishQuote(o.description)}`,
    ].join(' ');
  const lines = [
    `# ${name} completion for fish, generated by \`${name} completion fish\`. Install it:`,
    `#   ${name} completion fish > ~/.config/fish/completions/${name}.fish`,
    '',
    '# Keys complete nothing; file names only where an argument or option takes a file.',
    `complete -c ${name} -f`,
    ...spec.commands.map((c) => `complete -c ${name} -n __fish_use_subcommand -a ${checkName(c.name)} -d ${fishQuote(c.description)}`),
    ...spec.globals.map((o) => option(o)),
  ];
  for (const c of spec.commands) {
    const condition = `__fish_seen_subcommand_from ${checkName(c.name)}`;
    lines.push(...c.options.map((o) => option(o, condition)));
    if (c.args.some((a) => a.file)) lines.push(`complete -c ${name} -n ${fishQuote(condition)} -F`);
    const choices = c.args.flatMap((a) => a.choices ?? []);
    if (choices.length > 0) lines.push(`complete -c ${name} -n ${fishQuote(condition)} -a ${fishQuote(choices.join(' '))}`);
  }
  return `${lines.join('\n')}\n`;
}
