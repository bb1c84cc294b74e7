// Keep of Lanterns: rooms, buttons, a score. See index.html for the two
// planted bugs.
window.gameplan = { score: 0, done: false };

var chest = null; // never filled: opening it reads a property of null

var rooms = {
  gate: {
    name: 'The Gate',
    story: 'A keep of lanterns rises in the dusk. The gate is open.',
    choices: [['Start', function () { go('hall'); }]]
  },
  hall: {
    name: 'The Hall',
    story: 'Lanterns hang from the rafters. A chest sits by the hearth.',
    choices: [
      // Planted bug 1: throws "Cannot read properties of null".
      ['Open chest', function () { window.gameplan.score += chest.gold; }],
      ['Go down to the cellar', function () { go('cellar'); }],
      ['Walk into the garden', function () { go('garden'); }],
      ['Climb the tower', function () { go('tower'); }]
    ]
  },
  garden: {
    name: 'The Garden',
    story: 'Night flowers glow between the stones.',
    choices: [
      ['Pick a flower', function () { window.gameplan.score += 1; go('garden'); }],
      ['Back to the hall', function () { go('hall'); }]
    ]
  },
  tower: {
    name: 'The Tower',
    story: 'The wind howls. You can see the whole valley from here.',
    choices: [
      ['Light the beacon', function () {
        window.gameplan.done = true;
        go('end');
      }],
      ['Back to the hall', function () { go('hall'); }]
    ]
  },
  // Planted bug 2: the door shuts and no choice leads anywhere.
  cellar: {
    name: 'The Cellar',
    story: 'The door slams shut behind you. It is very dark.',
    choices: [
      ['Pull the lever', function () {}],
      ['Shout for help', function () {}]
    ]
  },
  end: {
    name: 'The Beacon',
    story: 'The beacon burns. The keep is safe. You win!',
    choices: []
  }
};

function go(id) {
  var room = rooms[id];
  document.getElementById('room').textContent = room.name;
  document.getElementById('story').textContent = room.story;
  document.getElementById('score').textContent = 'Score: ' + window.gameplan.score;
  var choices = document.getElementById('choices');
  choices.innerHTML = '';
  room.choices.forEach(function (choice) {
    var button = document.createElement('button');
    button.textContent = choice[0];
    button.addEventListener('click', choice[1]);
    choices.appendChild(button);
  });
}

go('gate');
