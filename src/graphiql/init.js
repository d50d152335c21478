// Starts GraphiQL against this server: queries and mutations over HTTP,
// subscriptions over the websocket on the same /graphql URL. A token set in
// the Headers tab ({"Authorization": "Bearer ..."}) is sent on both.
(function () {
  const url = new URL('/graphql', window.location.href).href;
  const wsUrl = url.replace(/^http/, 'ws');

  function authorization() {
    try {
      const headers = JSON.parse(window.localStorage.getItem('graphiql:headers') || '{}');
      return headers.Authorization || headers.authorization;
    } catch (_) {
      return undefined;
    }
  }

  const wsClient = graphqlWs.createClient({
    url: wsUrl,
    lazy: true,
    connectionParams: function () {
      const auth = authorization();
      return auth ? { authorization: auth } : {};
    },
  });

  const fetcher = GraphiQL.createFetcher({ url: url, wsClient: wsClient });
  const root = ReactDOM.createRoot(document.getElementById('graphiql'));
  root.render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultEditorToolsVisibility: true,
      defaultQuery: '# Welcome to ephemera.\n{\n  storyTray(first: 10) {\n    nodes { author { username } latestCreatedAt storyCount hasUnseen }\n  }\n}\n',
    }),
  );
})();
