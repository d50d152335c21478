// Starts GraphiQL against this server: queries and mutations over HTTP,
// subscriptions over the websocket on the same /graphql URL. The token set
// in the Headers tab ({"Authorization": "Bearer ..."}) is sent on both,
// whether or not "persist headers" is on: GraphiQL hands the tab's headers
// to the fetcher with every operation, and the websocket's connection_init
// takes them from there (the socket reconnects when they change).
(function () {
  const url = new URL('/graphql', window.location.href).href;
  const wsUrl = url.replace(/^http/, 'ws');

  // The Authorization header of the Headers tab, as GraphiQL last gave it.
  let current;
  // The one the open socket was initialised with.
  let connectedWith;

  function authorizationOf(headers) {
    if (!headers) {
      return undefined;
    }
    if (typeof headers === 'string') {
      try {
        headers = JSON.parse(headers || '{}');
      } catch (_) {
        return undefined;
      }
    }
    return headers.Authorization || headers.authorization;
  }

  const wsClient = graphqlWs.createClient({
    url: wsUrl,
    lazy: true,
    connectionParams: function () {
      connectedWith = current;
      return current ? { authorization: current } : {};
    },
  });

  const base = GraphiQL.createFetcher({ url: url, wsClient: wsClient });
  function fetcher(params, options) {
    const auth = authorizationOf(options && options.headers);
    if (auth !== current) {
      current = auth;
      if (connectedWith !== undefined || auth !== undefined) {
        // A new token: the next subscription opens a socket that sends it.
        wsClient.terminate();
        connectedWith = undefined;
      }
    }
    return base(params, options);
  }

  const root = ReactDOM.createRoot(document.getElementById('graphiql'));
  root.render(
    React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultEditorToolsVisibility: true,
      defaultQuery: '# Welcome to ephemera.\n{\n  storyTray(first: 10) {\n    nodes { author { username } latestCreatedAt storyCount hasUnseen }\n  }\n}\n',
    }),
  );
})();
