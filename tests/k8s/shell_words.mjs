// Enough of sh's word splitting to read the `exec nsbox serve ...` line of a container's
// `sh -c` script: quotes removed, `$VAR` and `${VAR...}` kept as written (they are the
// container's to expand), backslash-newline joined; `;`, `&`, `|` and newlines end a
// command and come back as the word ";".
export function shellWords(script) {
  const words = [];
  let word = null;
  const end = () => {
    if (word !== null) words.push(word);
    word = null;
  };
  for (let i = 0; i < script.length; i++) {
    const c = script[i];
    if (c === "\\" && script[i + 1] === "\n") {
      i++;
      continue;
    }
    if (c === "\\") {
      word = (word ?? "") + (script[++i] ?? "");
    } else if (c === "'") {
      const close = script.indexOf("'", i + 1);
      if (close < 0) throw new Error("an unterminated ' in the script");
      word = (word ?? "") + script.slice(i + 1, close);
      i = close;
    } else if (c === '"') {
      let j = i + 1;
      let text = "";
      for (; j < script.length && script[j] !== '"'; j++)
        text += script[j] === "\\" && '"$`\\'.includes(script[j + 1]) ? script[++j] : script[j];
      if (j >= script.length) throw new Error('an unterminated " in the script');
      word = (word ?? "") + text;
      i = j;
    } else if (c === "#" && word === null) {
      while (i + 1 < script.length && script[i + 1] !== "\n") i++;
    } else if (";&|\n".includes(c)) {
      end();
      if (words[words.length - 1] !== ";") words.push(";");
    } else if (c === " " || c === "\t") {
      end();
    } else {
      word = (word ?? "") + c;
    }
  }
  end();
  return words;
}
