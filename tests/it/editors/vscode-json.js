// Drives the VS Code JSON language service (the engine of VS Code's JSON
// support) over one document with one schema, as the editor would, and
// prints what the editor would show: each diagnostic with its range, and
// the hover at each requested position. Used by tests/editors.rs.
//
// usage: node vscode-json.js NODE_MODULES SCHEMA DOCUMENT [LINE:CHAR ...]
// (0-based positions, as the language server protocol counts them)
'use strict';
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

const [modules, schemaPath, docPath, ...positions] = process.argv.slice(2);
const need = (name) => require(path.join(modules, name));
const { getLanguageService } = need('vscode-json-languageservice');
const { TextDocument } = need('vscode-languageserver-textdocument');

const schemaUri = pathToFileURL(path.resolve(schemaPath)).href;
const service = getLanguageService({
  // Only the schema named here is ever read: no network.
  schemaRequestService: (uri) =>
    uri === schemaUri
      ? Promise.resolve(fs.readFileSync(schemaPath, 'utf8'))
      : Promise.reject(new Error(`unexpected schema request ${uri}`)),
});
service.configure({
  validate: true,
  schemas: [{ uri: schemaUri, fileMatch: ['*.json'] }],
});

(async () => {
  const text = fs.readFileSync(docPath, 'utf8');
  const doc = TextDocument.create(pathToFileURL(path.resolve(docPath)).href, 'json', 1, text);
  const json = service.parseJSONDocument(doc);
  const diagnostics = (await service.doValidation(doc, json)).map((d) => ({
    line: d.range.start.line,
    character: d.range.start.character,
    severity: d.severity,
    message: d.message,
  }));
  const hovers = [];
  for (const p of positions) {
    const [line, character] = p.split(':').map(Number);
    const h = await service.doHover(doc, { line, character }, json);
    const contents = h ? [].concat(h.contents).map((c) => (typeof c === 'string' ? c : c.value)).join('\n') : null;
    hovers.push({ line, character, contents });
  }
  process.stdout.write(JSON.stringify({ diagnostics, hovers }, null, 1));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
